package drainer

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/tooling/testkit"
	dto "github.com/prometheus/client_model/go"
)

// claims returns how many claims the claim loop has run (empty ones too).
func claims(t *testing.T, e *Engine) uint64 {
	t.Helper()
	var m dto.Metric
	if err := e.metrics.ClaimBatchSize.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// holdingAdapter counts its calls by key, tells started of each, and
// answers success once proceed is closed.
type holdingAdapter struct {
	mu      sync.Mutex
	calls   map[string]int
	started chan string
	proceed chan struct{}
}

func newHoldingAdapter() *holdingAdapter {
	return &holdingAdapter{calls: map[string]int{}, started: make(chan string, 100), proceed: make(chan struct{})}
}

func (h *holdingAdapter) Dispatch(ctx context.Context, m *dispatch.Message) dispatch.Result {
	h.mu.Lock()
	h.calls[m.Key]++
	h.mu.Unlock()
	h.started <- m.Key
	select {
	case <-h.proceed:
		return dispatch.Result{Outcome: dispatch.Success, Status: 200}
	case <-ctx.Done():
		return dispatch.Result{Outcome: dispatch.Retry, Err: ctx.Err()}
	}
}

func (h *holdingAdapter) expectStarted(t *testing.T, key string) {
	t.Helper()
	select {
	case k := <-h.started:
		if k != key {
			t.Fatalf("the adapter was called for %s, want %s", k, key)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the adapter was not called for %s", key)
	}
}

// take leases the row of key to e (Engine.Lease) by its key
// (store.ClaimKey), as the gateway's record leases the row it records in
// its transaction; it reports whether e took the row.
func take(e *Engine, key string) bool {
	var got bool
	ran, err := e.Lease(context.Background(), func(ctx context.Context, c store.Claim) (*store.ClaimedRow, error) {
		row, err := e.st.ClaimKey(ctx, e.pool, key, c)
		got = row != nil
		return row, err
	})
	return ran && err == nil && got
}

// settledKeys keeps the keys an engine told to Config.Settled (tell).
type settledKeys struct {
	mu   sync.Mutex
	keys []string
}

func (s *settledKeys) tell(rows []store.Settle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range rows {
		s.keys = append(s.keys, r.Key)
	}
}

// list returns the keys told so far, in order.
func (s *settledKeys) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.keys)
}

// TestLeaseDispatchesTheRowAtOnce: with the claim loop asleep (no
// notifications, an hour's poll), Lease leases a just-enqueued row and
// dispatches it; it takes none when every worker slot is busy (the row
// stays pending, unattempted) and takes it once a slot is free; each row
// goes out once, counted under notify; the settled rows of an announcing
// route are told to Config.Settled; after Stop, Lease takes nothing.
func TestLeaseDispatchesTheRowAtOnce(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	h := newHoldingAdapter()
	var told settledKeys
	e := startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"t": h}, &Route{Tool: "t", Announce: true}),
		Config{Workers: 2, PollOnly: true, PollInterval: time.Hour, Settled: told.tell})
	// The claim loop's first claim (from the first due row, nothing due)
	// ran; with nothing to wake it, it sleeps for the poll.
	testkit.WaitFor(t, 30*time.Second, "the claim loop's first claim", func() (bool, string) { return claims(t, e) >= 1, "" })
	ctx := context.Background()

	a := enqueueN(t, pool, "run-a", "t", 1)[0]
	if !take(e, a) {
		t.Fatalf("take(%s) = false; want the row taken", a)
	}
	h.expectStarted(t, a)
	b := enqueueN(t, pool, "run-b", "t", 1)[0]
	if !take(e, b) {
		t.Fatalf("take(%s) = false; want the row taken", b)
	}
	h.expectStarted(t, b)
	c := enqueueN(t, pool, "run-c", "t", 1)[0]
	if take(e, c) {
		t.Fatalf("take(%s) with both slots busy = true; want it left", c)
	}
	if r := getRow(t, pool, c); r.Status != outbox.StatusPending || r.Attempts != 0 {
		t.Fatalf("the row Lease left is %s with %d attempts, want pending, unattempted", r.Status, r.Attempts)
	}
	close(h.proceed)
	testkit.WaitFor(t, 30*time.Second, "both rows succeeded and their slots free", func() (bool, string) {
		return countByStatus(t, pool)[outbox.StatusSucceeded] == 2 && e.active.Load() == 0, ""
	})
	if !take(e, c) {
		t.Fatalf("take(%s) with slots free = false; want the row taken", c)
	}
	h.expectStarted(t, c)
	testkit.WaitFor(t, 30*time.Second, "the third row succeeded", func() (bool, string) {
		return countByStatus(t, pool)[outbox.StatusSucceeded] == 3, ""
	})
	h.mu.Lock()
	for _, k := range []string{a, b, c} {
		if h.calls[k] != 1 {
			t.Errorf("%s dispatched %d times, want once", k, h.calls[k])
		}
	}
	h.mu.Unlock()
	if got := e.ClaimedRows(); got["notify"] != 3 || polled(e) != 0 || got["start"] != 0 {
		t.Fatalf("claimed rows by cause %v, want the 3 taken under notify", got)
	}
	testkit.WaitFor(t, 30*time.Second, "the three settled keys told", func() (bool, string) {
		settled := told.list()
		return len(settled) == 3 && slices.Contains(settled, a) && slices.Contains(settled, b) && slices.Contains(settled, c),
			"told " + fmt.Sprint(settled)
	})

	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := e.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	d := enqueueN(t, pool, "run-d", "t", 1)[0]
	if take(e, d) {
		t.Fatalf("take(%s) after Stop = true; want nothing taken", d)
	}
	if r := getRow(t, pool, d); r.Status != outbox.StatusPending || r.Attempts != 0 {
		t.Fatalf("a row offered after Stop is %s with %d attempts, want pending, unattempted", r.Status, r.Attempts)
	}
}

// TestLeaseAndClaimsKeepTheSlotBound: producers that enqueue and hand
// their rows over at once, racing the claim loop (woken by their
// notifications and its poll), never have more rows dispatched at once
// than Workers, and every row goes out exactly once.
func TestLeaseAndClaimsKeepTheSlotBound(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	const workers, producers, each = 2, 4, 15
	var inFlight, most atomic.Int64
	var mu sync.Mutex
	calls := map[string]int{}
	slow := dispatch.AdapterFunc(func(_ context.Context, m *dispatch.Message) dispatch.Result {
		n := inFlight.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		mu.Lock()
		calls[m.Key]++
		mu.Unlock()
		time.Sleep(3 * time.Millisecond)
		inFlight.Add(-1)
		return dispatch.Result{Outcome: dispatch.Success, Status: 200}
	})
	e := startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"t": slow}, &Route{Tool: "t"}),
		Config{Workers: workers, PollInterval: 20 * time.Millisecond})
	var wg sync.WaitGroup
	var taken atomic.Int64
	for p := range producers {
		wg.Go(func() {
			for i := range each {
				k := enqueueN(t, pool, "run-"+itoa(p)+"-"+itoa(i), "t", 1)[0]
				if take(e, k) {
					taken.Add(1)
				}
			}
		})
	}
	wg.Wait()
	testkit.WaitFor(t, 60*time.Second, "every row succeeded", func() (bool, string) {
		n := countByStatus(t, pool)[outbox.StatusSucceeded]
		return n == producers*each, itoa(n) + " succeeded"
	})
	if most.Load() > workers {
		t.Fatalf("%d rows were dispatched at once, Workers is %d", most.Load(), workers)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != producers*each {
		t.Fatalf("%d rows dispatched, want %d", len(calls), producers*each)
	}
	for k, n := range calls {
		if n != 1 {
			t.Fatalf("%s dispatched %d times", k, n)
		}
	}
	t.Logf("%d of %d rows taken by Lease, the others claimed", taken.Load(), producers*each)
}
