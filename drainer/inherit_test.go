package drainer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// severable is a pool on the test database whose connections can be cut:
// sever closes every connection it made and refuses new ones, as a
// credential rotation that ends the old role's sessions does. The cut is
// at one instant for every connection (severed): from then on no read or
// write of any of them goes through, so no statement sent after the first
// failure anyone saw is answered, however slowly sever closes them one by
// one on a loaded machine.
type severable struct {
	mu      sync.Mutex
	conns   []net.Conn
	cut     bool
	severed atomic.Bool
}

// severableConn is a connection of a severable pool.
type severableConn struct {
	net.Conn
	severed *atomic.Bool
}

// errSevered is what a cut connection reports: like a real net.Conn's, a
// *net.OpError. A bare error, which no net.Conn returns, once made a claim
// read in flight at the cut look like a statement the database refused,
// and the claim logged the outage twice.
var errSevered error = &net.OpError{Op: "read", Net: "tcp", Err: errors.New("severed")}

func (c severableConn) Read(b []byte) (int, error) {
	if c.severed.Load() {
		return 0, errSevered
	}
	return c.Conn.Read(b)
}

func (c severableConn) Write(b []byte) (int, error) {
	if c.severed.Load() {
		return 0, errSevered
	}
	return c.Conn.Write(b)
}

func (s *severable) pool(t *testing.T, of *pgxpool.Pool) *pgxpool.Pool {
	t.Helper()
	cfg := of.Config()
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.cut {
			return nil, errSevered
		}
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		s.conns = append(s.conns, c)
		return severableConn{Conn: c, severed: &s.severed}, nil
	}
	p, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// restore accepts new connections again.
func (s *severable) restore() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cut = false
	s.conns = nil
	s.severed.Store(false)
}

func (s *severable) sever() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cut = true
	s.severed.Store(true)
	for _, c := range s.conns {
		_ = c.Close()
	}
}

// TestInheritedCompletionsSettleTheirRows: an engine's rows are answered
// after its database connections are gone, so it stops with completions it
// could not write. The next engine on the database, given them
// (Config.Inherited), writes them before it reclaims anything: every row
// settles with its first answer, and none is sent a second time, although
// their leases expired meanwhile.
func TestInheritedCompletionsSettleTheirRows(t *testing.T) {
	t.Parallel()
	good := newPool(t)
	const n = 6
	keys := enqueueN(t, good, "run-inherit", "t", n)

	var s severable
	h := newHeldCalls()
	rt := testRouting(t, map[string]dispatch.Adapter{"t": h.adapter()}, &Route{Tool: "t"})
	a, err := New(s.pool(t, good), rt, Config{Workers: n, Lease: 2 * time.Second, LeaseMargin: 500 * time.Millisecond,
		PollInterval: 50 * time.Millisecond, ReclaimInterval: 100 * time.Millisecond,
		Metrics: NewMetrics(prometheus.NewRegistry(), "test")})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "every row in a call", func() (bool, string) {
		return h.inCall.Load() == n, ""
	})
	s.sever()
	close(h.release)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Stop(ctx); err == nil {
		t.Fatal("the severed engine stopped without reporting its unwritten completions")
	}
	inherited := a.Unwritten()
	if len(inherited) != n {
		t.Fatalf("unwritten completions after Stop: %d, want %d", len(inherited), n)
	}
	for _, k := range keys {
		if st := getRow(t, good, k); st.Status != outbox.StatusInFlight {
			t.Fatalf("row %s is %s before the hand-over, want in_flight", k, st.Status)
		}
	}

	startEngine(t, good, rt, Config{Workers: n, Inherited: inherited})
	testkit.WaitFor(t, 30*time.Second, "every row settled by its first answer", func() (bool, string) {
		return countByStatus(t, good)[outbox.StatusSucceeded] == n, ""
	})
	h.sentOnceWithFirstAnswer(t, good, keys)
}

// TestHeldAnswersWrittenBeforeOwnRowsAreReclaimed: a replica cut off from
// the database holds the answers its calls got meanwhile (being written,
// retried for up to a lease, then kept for a later write). When the
// database is back after the rows' leases expired, it does not reclaim the
// rows whose answers it holds, and writes those answers first, so its own
// rows settle with their first answer and none is sent a second time. Its
// reclaimer, running every 50 ms, reclaimed them before the held answers'
// next try (a retry's back-off, or every 2 s) and sent them again.
func TestHeldAnswersWrittenBeforeOwnRowsAreReclaimed(t *testing.T) {
	t.Parallel()
	good := newPool(t)
	const n = 4
	keys := enqueueN(t, good, "run-held", "t", n)
	var s severable
	h := newHeldCalls()
	rt := testRouting(t, map[string]dispatch.Adapter{"t": h.adapter()}, &Route{Tool: "t"})
	e := startEngine(t, s.pool(t, good), rt, Config{Workers: n, Lease: 2 * time.Second, LeaseMargin: 500 * time.Millisecond,
		PollInterval: 50 * time.Millisecond, ReclaimInterval: 50 * time.Millisecond})
	testkit.WaitFor(t, 30*time.Second, "every row in a call", func() (bool, string) {
		return h.inCall.Load() == n, ""
	})
	s.sever()
	close(h.release) // answered while the database is unreachable: held
	// (once the answers reached the completer: a worker a loaded machine
	// did not run until the leases expired holds nothing the engine knows)
	testkit.WaitFor(t, 30*time.Second, "every answer held", func() (bool, string) {
		return len(e.completer.held()) == n, fmt.Sprint(len(e.completer.held()))
	})
	testkit.WaitFor(t, 30*time.Second, "every lease expired", func() (bool, string) {
		var live int
		err := good.QueryRow(context.Background(), `SELECT count(*) FROM drainer.outbox WHERE status = 'in_flight' AND lease_expires_at >= now()`).Scan(&live)
		return err == nil && live == 0, fmt.Sprint(live, err)
	})
	s.restore()
	testkit.WaitFor(t, 30*time.Second, "every row settled", func() (bool, string) {
		return countByStatus(t, good)[outbox.StatusSucceeded] == n, fmt.Sprint(countByStatus(t, good))
	})
	h.sentOnceWithFirstAnswer(t, good, keys)
}

// heldCalls is a provider whose calls wait until release is closed, then
// answer 200; it counts the calls in progress and the sends of each key.
type heldCalls struct {
	inCall  atomic.Int64
	release chan struct{}
	mu      sync.Mutex
	sent    map[string]int
}

func newHeldCalls() *heldCalls {
	return &heldCalls{release: make(chan struct{}), sent: map[string]int{}}
}

func (h *heldCalls) adapter() dispatch.Adapter {
	return dispatch.AdapterFunc(func(_ context.Context, m *dispatch.Message) dispatch.Result {
		h.mu.Lock()
		h.sent[m.Key]++
		h.mu.Unlock()
		h.inCall.Add(1)
		<-h.release
		return dispatch.Result{Outcome: dispatch.Success, Status: 200, Response: []byte(`{"first":true}`)}
	})
}

// sentOnceWithFirstAnswer checks that each row of keys was sent once and
// settled with its first answer, on its first attempt.
func (h *heldCalls) sentOnceWithFirstAnswer(t *testing.T, pool *pgxpool.Pool, keys []string) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, k := range keys {
		if h.sent[k] != 1 {
			t.Errorf("key %s sent %d times, want once: its answer was held", k, h.sent[k])
		}
		if st := getRow(t, pool, k); st.Attempts != 1 || string(st.Response) != `{"first": true}` {
			t.Errorf("row %s: attempts %d, response %s; want its first answer", k, st.Attempts, st.Response)
		}
	}
}
