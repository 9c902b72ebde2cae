package drainer

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/compensations"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// testRouting routes each tool to an adapter of the same name.
func testRouting(t testing.TB, adapters map[string]dispatch.Adapter, routes ...*Route) *Routing {
	t.Helper()
	var entries []*dispatch.Entry
	for name, a := range adapters {
		entries = append(entries, &dispatch.Entry{Name: name, Type: "test", Adapter: a, Timeout: time.Second})
	}
	reg, err := dispatch.NewRegistry(entries...)
	if err != nil {
		t.Fatal(err)
	}
	rt := &Routing{Routes: map[string]*Route{}, Registry: reg, UnroutedRecheck: 200 * time.Millisecond}
	for _, r := range routes {
		r.Class = cmp.Or(r.Class, "key_idempotent")
		r.MaxAttempts = cmp.Or(r.MaxAttempts, 5)
		r.Backoff = Backoff{Base: 10 * time.Millisecond, Cap: 50 * time.Millisecond, MaxRetryAfter: time.Second}
		r.Adapter = cmp.Or(r.Adapter, r.Tool)
		rt.Routes[r.Tool] = r
	}
	comp := map[string]string{}
	for tool, r := range rt.Routes {
		comp[tool] = r.Compensation
	}
	rt.Compensations = compensations.NewMap(comp)
	return rt
}

// startEngine starts an engine with fast test timings and stops it at cleanup.
func startEngine(t testing.TB, pool *pgxpool.Pool, rt *Routing, cfg Config) *Engine {
	t.Helper()
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(prometheus.NewRegistry(), "test")
	}
	cfg.Workers = cmp.Or(cfg.Workers, 8)
	cfg.Lease = cmp.Or(cfg.Lease, 10*time.Second)
	cfg.LeaseMargin = cmp.Or(cfg.LeaseMargin, 500*time.Millisecond)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, 50*time.Millisecond)
	cfg.ReclaimInterval = cmp.Or(cfg.ReclaimInterval, 100*time.Millisecond)
	cfg.SnapshotInterval = cmp.Or(cfg.SnapshotInterval, 200*time.Millisecond)
	e, err := New(pool, rt, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return e
}

func TestEngineDrainsAndRecordsResponses(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	var calls atomic.Int64
	ok := dispatch.AdapterFunc(func(_ context.Context, m *dispatch.Message) dispatch.Result {
		calls.Add(1)
		resp, _ := json.Marshal(map[string]any{"key": m.Key, "attempt": m.Attempt})
		return dispatch.Result{Outcome: dispatch.Success, Status: 201, Response: resp}
	})
	keys := enqueueN(t, pool, "run-1", "ok", 200)
	metrics := NewMetrics(prometheus.NewRegistry(), "test")
	startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"ok": ok}, &Route{Tool: "ok"}), Config{Workers: 8, Metrics: metrics})
	testkit.WaitFor(t, 20*time.Second, "all rows succeeded", func() (bool, string) { return countByStatus(t, pool)["succeeded"] == 200, "" })
	if calls.Load() != 200 {
		t.Fatalf("adapter called %d times for 200 rows", calls.Load())
	}
	r := getRow(t, pool, keys[7])
	if r.Attempts != 1 || r.ResponseStatus == nil || *r.ResponseStatus != 201 || !strings.Contains(string(r.Response), keys[7]) {
		t.Fatalf("row state %+v, response %s", r, r.Response)
	}
	var status string
	var resp []byte
	if err := pool.QueryRow(t.Context(), "SELECT status, response FROM drainer.result($1)", keys[7]).Scan(&status, &resp); err != nil || status != "succeeded" {
		t.Fatalf("drainer.result: %s %v", status, err)
	}
	if got := testutil.ToFloat64(metrics.DispatchTotal.WithLabelValues("ok", "success")); got != 200 {
		t.Fatalf("drainer_dispatch_total{ok,success} = %v, want 200", got)
	}
}

func TestEngineRetriesWithSameKey(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	var mu sync.Mutex
	seen := map[string][]int{}
	flaky := dispatch.AdapterFunc(func(_ context.Context, m *dispatch.Message) dispatch.Result {
		mu.Lock()
		seen[m.Key] = append(seen[m.Key], m.Attempt)
		n := len(seen[m.Key])
		mu.Unlock()
		if n < 3 {
			return dispatch.Result{Outcome: dispatch.Retry, Status: 503, Reason: "http_5xx", Err: errors.New("503")}
		}
		return dispatch.Result{Outcome: dispatch.Success, Status: 200}
	})
	keys := enqueueN(t, pool, "run-2", "flaky", 20)
	startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"flaky": flaky}, &Route{Tool: "flaky"}), Config{Workers: 4})
	testkit.WaitFor(t, 20*time.Second, "all rows succeeded", func() (bool, string) { return countByStatus(t, pool)["succeeded"] == 20, "" })
	for _, k := range keys {
		if got := seen[k]; len(got) != 3 || got[0] != 1 || got[1] != 2 || got[2] != 3 {
			t.Fatalf("key %s attempts %v, want [1 2 3]", k, got)
		}
		if r := getRow(t, pool, k); r.Attempts != 3 || r.LastError != nil {
			t.Fatalf("row %s: %+v", k, r)
		}
	}
}

func TestEngineMaxAttemptsFails(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	down := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		return dispatch.Result{Outcome: dispatch.Retry, Status: 503, Err: errors.New("503 service unavailable")}
	})
	keys := enqueueN(t, pool, "run-3", "down", 3)
	startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"down": down}, &Route{Tool: "down", MaxAttempts: 3}), Config{Workers: 4})
	testkit.WaitFor(t, 20*time.Second, "rows failed", func() (bool, string) { return countByStatus(t, pool)["failed"] == 3, "" })
	r := getRow(t, pool, keys[0])
	if r.Attempts != 3 || r.LastError == nil || !strings.Contains(*r.LastError, "attempts exhausted (3 of 3)") {
		t.Fatalf("row: %+v %s", r, deref(r.LastError))
	}
}

func TestEngineUnroutedWaitsThenDrainsAfterReload(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	keys := enqueueN(t, pool, "run-4", "newtool", 2)
	metrics := NewMetrics(prometheus.NewRegistry(), "test")
	e := startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"other": dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		return dispatch.Result{Outcome: dispatch.Success}
	})}, &Route{Tool: "other"}), Config{Workers: 2, Metrics: metrics})
	testkit.WaitFor(t, 10*time.Second, "unrouted rows looked at twice", func() (bool, string) {
		return testutil.ToFloat64(metrics.DispatchTotal.WithLabelValues("", "unrouted")) >= 4, ""
	})
	r := getRow(t, pool, keys[0])
	if r.Status != outbox.StatusPending && r.Status != outbox.StatusInFlight || r.Attempts > 1 {
		t.Fatalf("unrouted row: %+v", r)
	}
	// A look at an unrouted row leases it for a moment (its attempt counted
	// at claim, then given back): wait for a moment when both are pending,
	// and then no attempt may be left consumed.
	var pending, attempts int
	testkit.WaitFor(t, 10*time.Second, "both unrouted rows pending, no attempt consumed", func() (bool, string) {
		err := pool.QueryRow(t.Context(), `SELECT count(*), coalesce(max(attempts), 0) FROM drainer.outbox WHERE status = 'pending'`).Scan(&pending, &attempts)
		if err != nil {
			t.Fatal(err)
		}
		return pending == 2 && attempts == 0, ""
	})
	if err := e.Routed("newtool"); err == nil || !strings.Contains(err.Error(), `tool "newtool" has no route in the loaded config`) {
		t.Fatalf("Routed before the reload: %v", err)
	}
	if err := e.Routed("other"); err != nil {
		t.Fatalf("Routed of a routed tool: %v", err)
	}
	var got atomic.Int64
	e.Reload(testRouting(t, map[string]dispatch.Adapter{"newtool": dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		got.Add(1)
		return dispatch.Result{Outcome: dispatch.Success}
	})}, &Route{Tool: "newtool"}))
	testkit.WaitFor(t, 10*time.Second, "rows drained after reload", func() (bool, string) { return countByStatus(t, pool)["succeeded"] == 2, "" })
	if got.Load() != 2 {
		t.Fatalf("dispatched %d times", got.Load())
	}
	if err := e.Routed("newtool"); err != nil {
		t.Fatalf("Routed after the reload that routes it: %v", err)
	}
	if err := e.Routed("other"); err == nil {
		t.Fatal("Routed of a tool the reload removed: nil")
	}
}

// TestNoConcurrentDispatchAcrossEngines runs three engines on one table: no
// row is ever dispatched by two of them at once, and each exactly once.
func TestNoConcurrentDispatchAcrossEngines(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	const n = 600
	enqueueN(t, pool, "run-5", "t", n)
	var inFlight sync.Map
	var mu sync.Mutex
	count := map[string]int{}
	var overlap atomic.Int64
	adapter := dispatch.AdapterFunc(func(_ context.Context, m *dispatch.Message) dispatch.Result {
		if _, busy := inFlight.LoadOrStore(m.Key, true); busy {
			overlap.Add(1)
		}
		time.Sleep(time.Millisecond)
		inFlight.Delete(m.Key)
		mu.Lock()
		count[m.Key]++
		mu.Unlock()
		return dispatch.Result{Outcome: dispatch.Success}
	})
	for i := range 3 {
		startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"t": adapter}, &Route{Tool: "t"}),
			Config{Workers: 8, BatchSize: 4, ReplicaID: "replica-" + itoa(i)})
	}
	testkit.WaitFor(t, 30*time.Second, "all rows succeeded", func() (bool, string) { return countByStatus(t, pool)["succeeded"] == n, "" })
	if overlap.Load() != 0 {
		t.Fatalf("%d dispatches overlapped another of the same row", overlap.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(count) != n {
		t.Fatalf("dispatched %d distinct rows, want %d", len(count), n)
	}
	for k, c := range count {
		if c != 1 {
			t.Fatalf("row %s dispatched %d times", k, c)
		}
	}
}

// TestReclaimAfterLeaseExpiry simulates a worker that claimed rows and died:
// once the lease expires another engine dispatches them with the same key,
// the lost attempt counted.
func TestReclaimAfterLeaseExpiry(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	keys := enqueueN(t, pool, "run-6", "t", 5)
	dead, err := testStore.Claim(t.Context(), pool, store.Claim{Limit: 10, Lease: 300 * time.Millisecond, Replica: "dead-replica", Durable: true})
	if err != nil || len(dead) != 5 {
		t.Fatalf("claim: %d rows, %v", len(dead), err)
	}
	var mu sync.Mutex
	got := map[string]int{}
	adapter := dispatch.AdapterFunc(func(_ context.Context, m *dispatch.Message) dispatch.Result {
		mu.Lock()
		got[m.Key] = m.Attempt
		mu.Unlock()
		return dispatch.Result{Outcome: dispatch.Success}
	})
	metrics := NewMetrics(prometheus.NewRegistry(), "test")
	startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"t": adapter}, &Route{Tool: "t"}), Config{Workers: 4, Metrics: metrics})
	testkit.WaitFor(t, 10*time.Second, "reclaimed rows succeeded", func() (bool, string) { return countByStatus(t, pool)["succeeded"] == 5, "" })
	for _, k := range keys {
		if got[k] != 2 {
			t.Fatalf("key %s dispatched as attempt %d, want 2 (the lost attempt counts)", k, got[k])
		}
	}
	if v := testutil.ToFloat64(metrics.LeasesExpired); v != 5 {
		t.Fatalf("drainer_leases_expired_total = %v, want 5", v)
	}
}

// TestShutdownCutsOffCalls: calls still running when the grace ends are
// cancelled; key_idempotent rows go back to pending with the attempt
// consumed, non_idempotent rows to outcome_unknown; no row stays in_flight.
func TestShutdownCutsOffCalls(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	started := make(chan struct{}, 10)
	hang := dispatch.AdapterFunc(func(ctx context.Context, _ *dispatch.Message) dispatch.Result {
		started <- struct{}{}
		<-ctx.Done()
		return dispatch.Result{Outcome: dispatch.Ambiguous, Reason: "cancelled", Err: ctx.Err()}
	})
	keyKeys := enqueueN(t, pool, "run-8", "keyed", 1)
	nonKeys := enqueueN(t, pool, "run-9", "nonidem", 1)
	rt := testRouting(t, map[string]dispatch.Adapter{"keyed": hang, "nonidem": hang},
		&Route{Tool: "keyed"}, &Route{Tool: "nonidem", Class: "non_idempotent"})
	cfg := Config{Workers: 4, Metrics: NewMetrics(prometheus.NewRegistry(), "test"), Lease: 10 * time.Second,
		LeaseMargin: time.Second, PollInterval: 50 * time.Millisecond}
	e, err := New(pool, rt, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	<-started
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := e.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	k := getRow(t, pool, keyKeys[0])
	if k.Status != outbox.StatusPending || k.Attempts != 1 || k.DueIn > 100*time.Millisecond || !strings.Contains(deref(k.LastError), "cut off") {
		t.Fatalf("key_idempotent row after cut-off: %+v %s", k, deref(k.LastError))
	}
	n := getRow(t, pool, nonKeys[0])
	if n.Status != outbox.StatusOutcomeUnknown || n.Attempts != 1 {
		t.Fatalf("non_idempotent row after cut-off: %+v", n)
	}
	if c := countByStatus(t, pool)["in_flight"]; c != 0 {
		t.Fatalf("%d rows left in_flight", c)
	}
}

func TestNotifyWakesClaimer(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	done := make(chan string, 1)
	adapter := dispatch.AdapterFunc(func(_ context.Context, m *dispatch.Message) dispatch.Result {
		done <- m.Key
		return dispatch.Result{Outcome: dispatch.Success}
	})
	// Polling is effectively off: only LISTEN/NOTIFY can wake the claimer.
	e := startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"t": adapter}, &Route{Tool: "t"}),
		Config{Workers: 2, PollInterval: time.Hour})
	// The row is enqueued once the listener listens, so its notification
	// must reach it however long connecting took.
	select {
	case <-e.listening:
	case <-time.After(30 * time.Second):
		t.Fatal("the listener did not listen within 30s")
	}
	keys := enqueueN(t, pool, "run-10", "t", 1)
	select {
	case k := <-done:
		if k != keys[0] {
			t.Fatalf("dispatched %s, want %s", k, keys[0])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a notification did not wake the claimer")
	}
}

func TestSnapshotMatchesDatabase(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	enqueueN(t, pool, "run-11", "ok", 30)
	for i := range 5 {
		enqueueN(t, pool, "run-bad-"+itoa(i), "bad", 1)
	}
	metrics := NewMetrics(prometheus.NewRegistry(), "test")
	startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{
		"ok": dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
			return dispatch.Result{Outcome: dispatch.Success}
		}),
		"bad": dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
			return dispatch.Result{Outcome: dispatch.Terminal, Err: errors.New("no")}
		}),
	}, &Route{Tool: "ok"}, &Route{Tool: "bad"}), Config{Workers: 4, Metrics: metrics})
	testkit.WaitFor(t, 15*time.Second, "snapshot reflects the drain", func() (bool, string) {
		return testutil.ToFloat64(metrics.OutboxRows.WithLabelValues("succeeded")) == 30 &&
			testutil.ToFloat64(metrics.OutboxRows.WithLabelValues("failed")) == 5, ""
	})
	if v := testutil.ToFloat64(metrics.OutboxRows.WithLabelValues("pending")); v != 0 {
		t.Fatalf("pending gauge %v", v)
	}
}

// TestTerminalFailureCancelsUnattemptedRowsOfRun: a forward row that fails
// aborts its run in the same transaction; the run's never-attempted rows are
// cancelled and never dispatched. Never: a marker row of another run, due
// after the cancelled one, is claimed in the claim order (next_attempt_at,
// seq) behind it, so once the marker was claimed the cancelled row had its
// turn and was passed over.
func TestTerminalFailureCancelsUnattemptedRowsOfRun(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := t.Context()
	first := enqueueN(t, pool, "run-x", "bad", 1)
	var calls atomic.Int64
	rt := testRouting(t, map[string]dispatch.Adapter{
		"bad": dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
			calls.Add(1)
			return dispatch.Result{Outcome: dispatch.Terminal, Status: 422, Err: errors.New("http 422")}
		}),
		"later": dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
			calls.Add(100)
			return dispatch.Result{Outcome: dispatch.Success}
		}),
		"marker": dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
			return dispatch.Result{Outcome: dispatch.Success}
		}),
	}, &Route{Tool: "bad"}, &Route{Tool: "later"}, &Route{Tool: "marker"})
	// The later step is due only after the first has failed; the marker,
	// of another run, after the later step.
	if _, err := pool.Exec(ctx, `SELECT drainer.enqueue('run-x', 'step-later', 'later', '', '{}')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE drainer.outbox SET next_attempt_at = now() + interval '2 seconds' WHERE step_id = 'step-later'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT drainer.enqueue('run-marker', 'step-marker', 'marker', '', '{}')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE drainer.outbox SET next_attempt_at = (SELECT next_attempt_at FROM drainer.outbox WHERE step_id = 'step-later') + interval '1 millisecond'
	    WHERE step_id = 'step-marker'`); err != nil {
		t.Fatal(err)
	}
	startEngine(t, pool, rt, Config{Workers: 2})
	testkit.WaitFor(t, 10*time.Second, "first row failed", func() (bool, string) { return getRow(t, pool, first[0]).Status == outbox.StatusFailed, "" })
	var status outbox.Status
	var lastErr string
	if err := pool.QueryRow(ctx, "SELECT status, last_error FROM drainer.outbox WHERE step_id = 'step-later'").Scan(&status, &lastErr); err != nil {
		t.Fatal(err)
	}
	if status != outbox.StatusCancelled || !strings.Contains(lastErr, "run aborted") {
		t.Fatalf("later step: %s %q, want cancelled naming the abort", status, lastErr)
	}
	// The claim that took the marker took, before it, every claimable row
	// due earlier: a later step still claimable would be in flight or done
	// by the time the marker succeeded, not cancelled with no attempt.
	testkit.WaitFor(t, 30*time.Second, "the marker, due after the cancelled row, succeeded", func() (bool, string) {
		var s string
		if err := pool.QueryRow(ctx, "SELECT status FROM drainer.outbox WHERE step_id = 'step-marker'").Scan(&s); err != nil {
			t.Fatal(err)
		}
		return outbox.Status(s) == outbox.StatusSucceeded, s
	})
	var attempts int
	if err := pool.QueryRow(ctx, "SELECT status, attempts FROM drainer.outbox WHERE step_id = 'step-later'").Scan(&status, &attempts); err != nil {
		t.Fatal(err)
	}
	if status != outbox.StatusCancelled || attempts != 0 || calls.Load() != 1 {
		t.Fatalf("later step %s with %d attempts, adapter calls %d: the cancelled row was claimed or dispatched", status, attempts, calls.Load())
	}
	// Enqueues into the aborted run are created cancelled.
	var created bool
	if err := pool.QueryRow(ctx, `SELECT created FROM drainer.enqueue('run-x', 'step-3', 'later', '', '{}')`).Scan(&created); err != nil || !created {
		t.Fatalf("enqueue into aborted run: created %v err %v", created, err)
	}
	if err := pool.QueryRow(ctx, "SELECT status FROM drainer.outbox WHERE step_id = 'step-3'").Scan(&status); err != nil || status != outbox.StatusCancelled {
		t.Fatalf("enqueue into aborted run: status %s err %v", status, err)
	}
}

func TestStartFailsOnUnmigratedSchemaAndStopReturns(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	rt := testRouting(t, map[string]dispatch.Adapter{"t": dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		return dispatch.Result{Outcome: dispatch.Success}
	})}, &Route{Tool: "t"})
	e, err := New(pool, rt, Config{Workers: 1, Schema: "not_migrated", Metrics: NewMetrics(prometheus.NewRegistry(), "test")})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(t.Context()); err == nil || !strings.Contains(err.Error(), "drainer migrate") {
		t.Fatalf("start on an unmigrated schema: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := e.Stop(ctx); err != nil {
		t.Fatalf("stop after a failed start: %v", err)
	}
}

// TestNotifyOptOut: while a daemon sleeps (it holds a slot of the wake
// gate), an enqueue notifies, unless its producer set drainer.notify = off.
func TestNotifyOptOut(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := t.Context()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	listener := storetest.ListenWhileAsleep(t, pool, testStore, time.Second)
	if _, err := conn.Exec(ctx, "SET drainer.notify = off"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT drainer.enqueue('r', 's1', 't', '', '{}')"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	if n, err := listener.Conn().WaitForNotification(wctx); err == nil {
		t.Fatalf("notification sent despite drainer.notify = off: %+v", n)
	}
	cancel()
	if _, err := conn.Exec(ctx, "RESET drainer.notify"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT drainer.enqueue('r', 's2', 't', '', '{}')"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel = context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := listener.Conn().WaitForNotification(wctx); err != nil {
		t.Fatalf("no notification by default while a daemon sleeps: %v", err)
	}
}

// TestRowBehindTheLowWaterMarkIsClaimed: a row that becomes due behind the
// claimer's low-water mark (a transaction that committed late) is claimed by
// the periodic claim from the start.
func TestRowBehindTheLowWaterMarkIsClaimed(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	keys := enqueueN(t, pool, "run", "t", 200)
	ok := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		return dispatch.Result{Outcome: dispatch.Success}
	})
	e := startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"t": ok}, &Route{Tool: "t"}), Config{Workers: 4, BatchSize: 4})
	testkit.WaitFor(t, 30*time.Second, "drained", func() (bool, string) { return getRow(t, pool, keys[199]).Status == outbox.StatusSucceeded, "" })
	if e.mark.pos == nil {
		t.Fatal("the claimer kept no low-water mark")
	}
	late := storetest.Insert(t, pool, storetest.Row{AgentRunID: "late", ToolName: "t", DueIn: -time.Hour})
	testkit.WaitFor(t, 30*time.Second, "the late row claimed", func() (bool, string) { return getRow(t, pool, late).Status == outbox.StatusSucceeded, "" })
}
