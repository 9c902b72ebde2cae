//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/producer"
	"github.com/drainer-io/drainer/tooling/mockprovider"
	"github.com/drainer-io/drainer/tooling/pgtemp"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The scenarios of this file take the database itself away: a restart of
// the server, and a stall of every server process. The shared test server
// cannot be treated like that, so each scenario runs its own pgtemp cluster.
//
// Each disruption hits a drain with work left, by construction rather than
// by timing: a gate in front of the provider is closed, a batch of rows is
// enqueued (none of them can succeed while the gate is closed), the
// disruption starts once a request is held at the gate (the daemons are
// dispatching), and the gate opens only then. Requests held at the gate
// whose daemon is still waiting reach the provider while the database is
// down or frozen: their effect is applied but cannot be recorded, which is
// where an exactly-once drain is most easily broken.

const (
	// pgChaosLease and pgChaosTimeout are the daemons' lease and adapter
	// timeout (a lease must exceed the timeout plus 5s). The timeout is
	// longer than in the other scenarios so that a request held at the gate
	// outlives a fast shutdown of the server, and its answer comes back
	// while the server is down.
	pgChaosLease   = 9 * time.Second
	pgChaosTimeout = 3 * time.Second
	// pgChaosTimeoutDelay is how long the provider's Timeout fault sleeps:
	// past the adapter timeout, so the daemon gives up first.
	pgChaosTimeoutDelay = 4 * time.Second
	// pgChaosShortStall is longer than the adapter timeout and shorter
	// than the lease: calls time out, no lease expires during the stall.
	pgChaosShortStall = 5 * time.Second
	// pgChaosLongStall is longer than the lease: every lease granted
	// before the stall has expired when the server wakes up, so reclaims
	// race with the completions the stall held back.
	pgChaosLongStall = 12 * time.Second
	// pgChaosLongDown keeps the server down longer than the lease: the
	// daemons give up writing the completions they hold, and the rows are
	// reclaimed once the server is back.
	pgChaosLongDown = 12 * time.Second
	// pgControlTimeout bounds one restart of the server.
	pgControlTimeout = 2 * time.Minute
)

// chaosGate sits between the daemons and the provider. Open, it passes
// every request through. Closed, it holds requests: none reaches the
// provider, so no row can succeed. When the gate opens, a held request goes
// through only if its daemon is still waiting for it (it has not given up
// at the adapter timeout) and it is the latest held request of its key;
// the others get a 503 (which nobody reads, or which is retried) without
// reaching the provider. So the provider never answers a request its
// daemon abandoned, and never gets two requests of one key at once from
// the gate.
type chaosGate struct {
	next http.Handler

	mu       sync.Mutex
	closed   *gateClosure // nil while open
	held     int          // requests waiting at the gate now
	arrived  int          // requests that arrived while the gate was closed
	late     int          // held requests passed through when the gate opened
	abandons int          // held requests not passed through
}

// gateClosure is one period during which the gate is closed.
type gateClosure struct {
	opened chan struct{}     // closed when the gate opens
	latest map[string]uint64 // key -> number of its latest held request
	n      uint64
}

func (g *chaosGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	c := g.closed
	if c == nil {
		g.mu.Unlock()
		g.next.ServeHTTP(w, r)
		return
	}
	g.held++
	g.arrived++
	c.n++
	me, key := c.n, r.Header.Get(mockprovider.HeaderIdempotencyKey)
	c.latest[key] = me
	g.mu.Unlock()
	// With the body read, the server watches the connection and cancels
	// the request's context as soon as the daemon gives up on it.
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err == nil {
		select {
		case <-c.opened:
		case <-r.Context().Done():
		}
	}
	g.mu.Lock()
	g.held--
	pass := err == nil && r.Context().Err() == nil && c.latest[key] == me
	if pass {
		g.late++
	} else {
		g.abandons++
	}
	g.mu.Unlock()
	if !pass {
		http.Error(w, "held at the chaos gate", http.StatusServiceUnavailable)
		return
	}
	g.next.ServeHTTP(w, r)
}

// close makes the gate hold requests from now on, and returns how many had
// arrived at it while closed so far.
func (g *chaosGate) close() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed == nil {
		g.closed = &gateClosure{opened: make(chan struct{}), latest: map[string]uint64{}}
	}
	return g.arrived
}

// open releases the held requests and passes every later one through.
func (g *chaosGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed != nil {
		close(g.closed.opened)
		g.closed = nil
	}
}

func (g *chaosGate) stats() (held, arrived, late, abandons int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held, g.arrived, g.late, g.abandons
}

// pgChaos is a chaos setup on a cluster of the scenario's own, with the
// gate in front of the provider.
type pgChaos struct {
	*chaosSetup
	cluster  *pgtemp.Cluster
	gate     *chaosGate
	enqueued int // rows enqueued so far (the next batch's first index)
	replicas []*daemon
}

// newPGChaosSetup is newChaosSetup on a new pgtemp cluster: the same faulty
// provider and config, the provider behind a chaosGate; first rows are
// enqueued.
func newPGChaosSetup(t *testing.T, rows, first int, seed uint64) *pgChaos {
	t.Helper()
	t.Logf("chaos seed %d (rows %d, full %v)", seed, rows, chaosFull())
	ctx, cancel := context.WithTimeout(context.Background(), pgControlTimeout)
	defer cancel()
	cluster, err := pgtemp.Start(ctx, pgtemp.Options{})
	if err != nil {
		t.Fatalf("this scenario needs a PostgreSQL server of its own, started from local binaries: %v", err)
	}
	t.Cleanup(func() {
		if err := cluster.Stop(); err != nil {
			t.Errorf("stop the scenario's cluster: %v", err)
		}
	})
	// Registered after Stop, so it runs first: a paused server cannot stop.
	t.Cleanup(func() {
		if err := cluster.Resume(); err != nil {
			t.Errorf("resume the scenario's cluster: %v", err)
		}
	})
	admin, err := pgx.Connect(ctx, cluster.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = admin.Exec(ctx, "CREATE DATABASE drainer_chaos")
	admin.Close(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	dbURL := cluster.URL("drainer_chaos")
	if res := runCLI(t, nil, "migrate", "--database-url", dbURL); res.code != 0 {
		t.Fatalf("drainer migrate: %s", res)
	}
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	provider := mockprovider.New(mockprovider.Config{
		Fail503:           0.08,
		Fail429:           0.05,
		RetryAfterSeconds: 1,
		Fail529:           0.02,
		ResetAfterEffect:  0.03,
		Timeout:           0.01,
		TimeoutDelay:      pgChaosTimeoutDelay,
		VerifyTuple:       true,
		Seed:              int64(seed),
	})
	gate := &chaosGate{next: provider}
	srv := httptest.NewServer(gate)
	// Cleanups run last first: open the gate, end the provider's sleeps,
	// then wait for the server's requests.
	t.Cleanup(srv.Close)
	t.Cleanup(provider.Close)
	t.Cleanup(gate.open)

	cfg := fmt.Sprintf(`workers: 8
lease: %s
adapters:
  provider:
    type: http
    url: %s/{tool_name}
    timeout: %s
    breaker: {consecutive_failures: 5, open_for: 1s}
routes:
  charge_card:
    adapter: provider
    class: key_idempotent
    max_attempts: 50
    backoff: {base: 50ms, cap: 500ms, max_retry_after: 5s}
    reclaim_hold: 1s
`, pgChaosLease, srv.URL, pgChaosTimeout)
	cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", cfg)
	s := &pgChaos{
		chaosSetup: &chaosSetup{dbURL: dbURL, pool: pool, provider: provider, cfgPath: cfgPath,
			rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))},
		cluster: cluster,
		gate:    gate,
	}
	s.enqueue(t, first)
	return s
}

// enqueue adds n charge_card rows, continuing the numbering of the rows
// enqueued before, and returns their keys.
func (s *pgChaos) enqueue(t *testing.T, n int) []string {
	t.Helper()
	keys := enqueueChargesFrom(t, s.pool, s.enqueued, n)
	s.enqueued += n
	s.keys = append(s.keys, keys...)
	return keys
}

// startReplicas starts n daemons on the scenario's database.
func (s *pgChaos) startReplicas(t *testing.T, n int) {
	for i := range n {
		s.replicas = append(s.replicas, s.start(t, "replica-"+strconv.Itoa(i)))
	}
}

// requireRunning fails the test if a daemon exited.
func (s *pgChaos) requireRunning() {
	for _, r := range s.replicas {
		r.requireRunning()
	}
}

// hold waits for d, checking that every daemon stays up meanwhile. Nothing
// is asserted about what happens during d: it is how long a fault lasts.
func (s *pgChaos) hold(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		s.requireRunning()
		time.Sleep(min(100*time.Millisecond, time.Until(end)))
	}
	s.requireRunning()
}

// count runs a count query on the scenario's database.
func (s *pgChaos) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// succeeded returns how many rows have succeeded.
func (s *pgChaos) succeeded(t *testing.T) int {
	return s.count(t, `SELECT count(*) FROM drainer.outbox WHERE status = 'succeeded'`)
}

// disrupt runs one round: with the gate closed, enqueue batch rows (work
// left that cannot finish before the gate opens) and wait until a
// daemon's request waits at the gate; then start the fault (begin: the
// database must be unavailable when it returns), open the gate, let the
// held requests through or go, end the fault (end), and wait until the
// daemons are back: every /readyz answers 200 and a row of the batch
// succeeded, which can only have been written after begin.
func (s *pgChaos) disrupt(t *testing.T, round string, batch int, begin, end func()) {
	t.Helper()
	_, _, late0, gone0 := s.gate.stats()
	before := s.gate.close()
	keys := s.enqueue(t, batch)
	// Wait for a request waiting at the gate now, not one that came and
	// went: its daemon is still in the call when the fault starts.
	testkit.WaitFor(t, chaosSettleBound(), round+": a request held at the closed gate", func() (bool, string) {
		s.requireRunning()
		held, arrived, _, _ := s.gate.stats()
		return held > 0, fmt.Sprintf("%d requests arrived at the gate, none waiting now", arrived-before)
	})
	begin()
	s.gate.open()
	testkit.WaitFor(t, chaosSettleBound(), round+": the gate empty", func() (bool, string) {
		s.requireRunning()
		held, _, _, _ := s.gate.stats()
		return held == 0, fmt.Sprintf("%d requests held", held)
	})
	_, _, late, gone := s.gate.stats()
	t.Logf("%s: %d requests held at the gate reached the provider while the database was unavailable, %d did not (given up by their daemon, or superseded)",
		round, late-late0, gone-gone0)
	end()
	for _, r := range s.replicas {
		r.waitReady(chaosSettleBound())
	}
	testkit.WaitFor(t, chaosSettleBound(), round+": a row of the batch succeeded", func() (bool, string) {
		s.requireRunning()
		n := s.count(t, `SELECT count(*) FROM drainer.outbox WHERE status = 'succeeded' AND key = ANY($1)`, keys)
		return n > 0, fmt.Sprintf("%d of %d succeeded; all rows: %v", n, len(keys), statusCounts(t, s.pool))
	})
	t.Logf("%s: drain resumed; %v", round, statusCounts(t, s.pool))
}

// finish waits until every row settled, checks the invariants and that
// every row succeeded (the provider's faults are all retryable), then stops
// the daemons, which must exit 0 leaving nothing in_flight.
func (s *pgChaos) finish(t *testing.T, scenario string, start time.Time) {
	t.Helper()
	s.waitSettled(t, s.requireRunning)
	elapsed := time.Since(start)
	var expired, lost float64
	for _, r := range s.replicas {
		expired += r.metric("drainer_leases_expired_total")
		lost += r.metric("drainer_leases_lost_total")
	}
	_, arrived, late, gone := s.gate.stats()
	t.Logf("%s: %.0f leases expired and reclaimed, %.0f completions fenced off (lease lost); provider: %d requests, %d replays; gate: %d held, %d passed late, %d not passed",
		scenario, expired, lost, s.provider.Requests(), s.provider.Replays(), arrived, late, gone)
	chaosResults.add(chaosCheck(t, scenario, s.chaosSetup, elapsed))
	if c := statusCounts(t, s.pool); c["succeeded"] != len(s.keys) {
		t.Errorf("%s: statuses %v, want all %d rows succeeded (every fault of the provider is retryable)", scenario, c, len(s.keys))
	}
	for _, r := range s.replicas {
		r.signal(syscall.SIGTERM)
	}
	for _, r := range s.replicas {
		if code := r.exitCode(60 * time.Second); code != 0 {
			t.Errorf("%s exited %d after SIGTERM, want 0", r.name, code)
		}
	}
	if c := statusCounts(t, s.pool); c["in_flight"] != 0 {
		t.Errorf("%s: rows left in_flight after shutdown: %v", scenario, c)
	}
}

// chaosPostgresRestart: 3 replicas drain while the Postgres server is
// restarted (fast shutdown: every connection is closed, open transactions
// roll back; then started again on the same port) once, or 3 times in full
// mode. The server stays down a moment (longer than the provider's
// Retry-After), in full mode once longer than the lease, so that the
// daemons give up the completions they hold and the rows are reclaimed.
// The daemons must stay up, reconnect and finish, with every row applied
// exactly once.
func chaosPostgresRestart(t *testing.T, seed uint64) {
	rows := chaosRows(300, 20000)
	restarts := chaosRows(1, 3)
	first := rows / 2
	s := newPGChaosSetup(t, rows, first, seed)
	s.startReplicas(t, 3)
	start := time.Now()
	testkit.WaitFor(t, chaosSettleBound(), "the drain under way", func() (bool, string) {
		s.requireRunning()
		n := s.succeeded(t)
		return n >= first/5, fmt.Sprintf("%d succeeded", n)
	})
	for i := range restarts {
		batch := (rows - first) / restarts
		if i == restarts-1 {
			batch = rows - s.enqueued
		}
		down := 1500*time.Millisecond + time.Duration(s.rng.IntN(1500))*time.Millisecond
		if i == 1 {
			down = pgChaosLongDown
		}
		round := fmt.Sprintf("restart %d/%d", i+1, restarts)
		s.disrupt(t, round, batch, func() {
			ctx, cancel := context.WithTimeout(context.Background(), pgControlTimeout)
			defer cancel()
			begun := time.Now()
			if err := s.cluster.Shutdown(ctx); err != nil {
				t.Fatalf("%s: %v", round, err)
			}
			t.Logf("%s: server shut down (in %v); it stays down %v", round, time.Since(begun).Round(time.Millisecond), down)
		}, func() {
			s.hold(down)
			ctx, cancel := context.WithTimeout(context.Background(), pgControlTimeout)
			defer cancel()
			if err := s.cluster.Startup(ctx); err != nil {
				t.Fatalf("%s: %v", round, err)
			}
			// The test's own connections died with the server.
			s.pool.Reset()
		})
	}
	s.finish(t, "postgres_restart", start)
}

// chaosPostgresStall: 3 replicas drain while every process of the
// Postgres server (the postmaster and all its children) is stopped with
// SIGSTOP and later continued, as in a failover or a host stall:
// connections stay open but nothing answers. The first stall (5s) is longer
// than the adapter timeout (3s) and shorter than the lease (9s); the second
// (12s) is longer than the lease, so every lease granted before it has
// expired when the server wakes up, and reclaims race with the completions
// the stall held back. Full mode repeats the pair. The daemons must stay up
// (no exit, no restart), and every row must be applied exactly once.
func chaosPostgresStall(t *testing.T, seed uint64) {
	rows := chaosRows(300, 20000)
	stalls := chaosRows(2, 4)
	first := rows / 2
	s := newPGChaosSetup(t, rows, first, seed)
	s.startReplicas(t, 3)
	start := time.Now()
	testkit.WaitFor(t, chaosSettleBound(), "the drain under way", func() (bool, string) {
		s.requireRunning()
		n := s.succeeded(t)
		return n >= first/5, fmt.Sprintf("%d succeeded", n)
	})
	for i := range stalls {
		batch := (rows - first) / stalls
		if i == stalls-1 {
			batch = rows - s.enqueued
		}
		stall := pgChaosShortStall
		if i%2 == 1 {
			stall = pgChaosLongStall
		}
		round := fmt.Sprintf("stall %d/%d (%v)", i+1, stalls, stall)
		var paused time.Time
		s.disrupt(t, round, batch, func() {
			if err := s.cluster.Pause(); err != nil {
				t.Fatalf("%s: %v", round, err)
			}
			paused = time.Now()
		}, func() {
			s.hold(time.Until(paused.Add(stall)))
			if err := s.cluster.Resume(); err != nil {
				t.Fatalf("%s: %v", round, err)
			}
		})
	}
	s.finish(t, "postgres_stall", start)
}

// enqueueChargesFrom is enqueueCharges for the rows numbered from to
// from+n-1, so that batches enqueued one after the other never repeat a
// tuple.
func enqueueChargesFrom(t *testing.T, pool *pgxpool.Pool, from, n int) []string {
	t.Helper()
	ctx := context.Background()
	var keys []string
	const batch = 500
	for lo := from; lo < from+n; lo += batch {
		ins := make([]producer.Intent, 0, batch)
		for i := lo; i < min(lo+batch, from+n); i++ {
			payload, _ := json.Marshal(map[string]any{"amount_cents": 100 + i, "currency": "EUR", "n": i})
			ins = append(ins, producer.Intent{
				Tuple: idemkey.Tuple{
					AgentRunID:    fmt.Sprintf("run-%04d", i/4),
					StepID:        fmt.Sprintf("step-%d", i%4),
					ToolName:      "charge_card",
					BusinessScope: fmt.Sprintf("customer-%d", i%37),
				},
				Payload: payload,
			})
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			res, err := producer.EnqueueBatchTx(ctx, tx, ins)
			if err != nil {
				return err
			}
			for i, r := range res {
				if !r.Created {
					return fmt.Errorf("intent %d: key %s not created", lo+i, r.Key)
				}
				if want := ins[i].Key(); r.Key != want {
					return fmt.Errorf("intent %d: key %s, want %s (idemkey)", lo+i, r.Key, want)
				}
				keys = append(keys, r.Key)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("enqueue: %v", err)
		}
	}
	return keys
}
