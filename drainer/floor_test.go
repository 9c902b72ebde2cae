package drainer

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// floorOf returns how far in the future a row's next attempt and its
// not_before floor are, by the database clock.
func floorOf(t testing.TB, pool *pgxpool.Pool, key string) (next, floor time.Duration) {
	t.Helper()
	var n, f *float64
	err := pool.QueryRow(t.Context(), `SELECT extract(epoch FROM next_attempt_at - now())::float8,
	        extract(epoch FROM not_before - now())::float8 FROM drainer.outbox WHERE key = $1`, key).Scan(&n, &f)
	if err != nil {
		t.Fatal(err)
	}
	if f == nil {
		return time.Duration(*n * float64(time.Second)), 0
	}
	return time.Duration(*n * float64(time.Second)), time.Duration(*f * float64(time.Second))
}

// retryAfterHour answers every call 429 with Retry-After: 1h.
func retryAfterHour(calls *atomic.Int64) dispatch.Adapter {
	return dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		calls.Add(1)
		return dispatch.Result{Outcome: dispatch.Retry, Status: 429, RetryAfter: time.Hour, Reason: dispatch.ReasonHTTP429,
			Err: fmt.Errorf("http 429")}
	})
}

// TestRetryAfterFloorSurvivesResume: rows that a provider told to come back
// in an hour stay an hour away through a pause and a resume of their
// adapter, while the resume does wake the rows the pause held back.
func TestRetryAfterFloorSurvivesResume(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := t.Context()
	var limited, ok atomic.Int64
	okAdapter := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		ok.Add(1)
		return dispatch.Result{Outcome: dispatch.Success}
	})
	rt := testRouting(t, map[string]dispatch.Adapter{"a": retryAfterHour(&limited), "b": okAdapter},
		&Route{Tool: "limited", Adapter: "a"}, &Route{Tool: "held", Adapter: "b"})
	rt.Routes["limited"].Backoff.MaxRetryAfter = 2 * time.Hour
	floored := enqueueN(t, pool, "run-l", "limited", 10)
	eng := startEngine(t, pool, rt, Config{Workers: 4})
	testkit.WaitFor(t, 30*time.Second, "every limited row answered 429", func() (bool, string) {
		for _, k := range floored {
			if r := getRow(t, pool, k); r.Attempts != 1 || r.Status != outbox.StatusPending {
				return false, ""
			}
		}
		return true, ""
	})
	for _, k := range floored {
		if next, floor := floorOf(t, pool, k); floor < 50*time.Minute || next < floor-time.Second {
			t.Fatalf("row %s after its 429: next attempt in %s, floor in %s; want both about an hour", k, next, floor)
		}
	}

	// Pause adapter b, let its rows be deferred, then resume both adapters.
	if _, err := pool.Exec(ctx, "INSERT INTO drainer.pauses (target, name, paused_by) VALUES ('adapter', 'a', 'test'), ('adapter', 'b', 'test')"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "the engine to read the pauses", func() (bool, string) {
		set := eng.pauses.Load()
		return set.Adapters["a"] && set.Adapters["b"], fmt.Sprint(set.Adapters)
	})
	held := enqueueN(t, pool, "run-h", "held", 3)
	testkit.WaitFor(t, 30*time.Second, "paused rows deferred", func() (bool, string) {
		next, _ := floorOf(t, pool, held[0])
		return next > 10*time.Second, ""
	})
	if _, err := pool.Exec(ctx, "DELETE FROM drainer.pauses"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "resumed rows drained", func() (bool, string) {
		for _, k := range held {
			if getRow(t, pool, k).Status != outbox.StatusSucceeded {
				return false, ""
			}
		}
		return true, ""
	})
	for _, k := range floored {
		if next, _ := floorOf(t, pool, k); next < 50*time.Minute {
			t.Fatalf("resume moved row %s to %s from now, before the provider's Retry-After", k, next)
		}
	}
	if n := limited.Load(); n != int64(len(floored)) {
		t.Fatalf("the rate-limited provider was called %d times; want %d (once per row)", n, len(floored))
	}
}

// TestRouteRemovedThenRestoredDrainsAtOnce: a row attempted before its route
// was removed drains as soon as a reload brings the route back, not at its
// next unrouted recheck.
func TestRouteRemovedThenRestoredDrainsAtOnce(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	// The provider answers 503 until the route is restored: a retry that
	// comes due before the test removes the route (its jittered backoff
	// can be near zero) is answered 503 again rather than drained under
	// the old routing.
	var restored atomic.Bool
	a := dispatch.AdapterFunc(func(_ context.Context, m *dispatch.Message) dispatch.Result {
		if !restored.Load() {
			return dispatch.Result{Outcome: dispatch.Retry, Status: 503, Err: fmt.Errorf("http 503")}
		}
		return dispatch.Result{Outcome: dispatch.Success}
	})
	rt := testRouting(t, map[string]dispatch.Adapter{"t": a}, &Route{Tool: "t"})
	rt.Routes["t"].Backoff = Backoff{Base: 2 * time.Second, Cap: 2 * time.Second}
	keys := enqueueN(t, pool, "run", "t", 1)
	eng := startEngine(t, pool, rt, Config{Workers: 2})
	testkit.WaitFor(t, 30*time.Second, "first attempt answered", func() (bool, string) {
		r := getRow(t, pool, keys[0])
		return r.Attempts >= 1 && r.Status == outbox.StatusPending, ""
	})

	// The route disappears: the row is now unrouted, rechecked once an hour.
	gone := testRouting(t, map[string]dispatch.Adapter{"t": a})
	gone.UnroutedRecheck = time.Hour
	eng.Reload(gone)
	testkit.WaitFor(t, 30*time.Second, "the unrouted row is deferred", func() (bool, string) {
		next, _ := floorOf(t, pool, keys[0])
		return next > 10*time.Minute, ""
	})
	back := testRouting(t, map[string]dispatch.Adapter{"t": a}, &Route{Tool: "t"})
	back.UnroutedRecheck = time.Hour
	restored.Store(true)
	eng.Reload(back)
	testkit.WaitFor(t, 30*time.Second, "the row drains once its route is back", func() (bool, string) {
		return getRow(t, pool, keys[0]).Status == outbox.StatusSucceeded, ""
	})
}

// TestRouteRestoredWhileUnroutedRowLeased: a claim made under a routing
// without the row's route leases the row; a reload brings the route back and
// its wake runs while the row is still leased (so it wakes nothing); then
// the claim's hand-back of the unrouted row is written, an unrouted recheck
// (an hour) away. The row must be woken again at once, not wait the hour:
// under load this interleaving left a woken row unclaimed.
func TestRouteRestoredWhileUnroutedRowLeased(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ok := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		return dispatch.Result{Outcome: dispatch.Success}
	})
	gone := testRouting(t, map[string]dispatch.Adapter{"t": ok})
	gone.UnroutedRecheck = time.Hour
	e, err := New(pool, gone, Config{Workers: 2, Metrics: NewMetrics(prometheus.NewRegistry(), "test")})
	if err != nil {
		t.Fatal(err)
	}
	keys := enqueueN(t, pool, "run-r", "t", 1)
	ctx := t.Context()

	// The claim loop's order: the routing in force, then the claim.
	rt := e.useRouting()
	rows, err := e.st.Claim(ctx, pool, store.Claim{Limit: 1, Lease: time.Minute, Replica: "test"})
	if err != nil || len(rows) != 1 {
		t.Fatalf("claim: %d rows, %v", len(rows), err)
	}
	back := testRouting(t, map[string]dispatch.Adapter{"t": ok}, &Route{Tool: "t"})
	back.UnroutedRecheck = time.Hour
	e.Reload(back)
	applyDeferrals(t, e) // the reload's wake: the row is still leased

	_, _, c := e.preflight(&rows[0], rt)
	rt.done()
	if c == nil || c.outcome != outbox.OutcomeUnrouted {
		t.Fatalf("preflight under the routing without the route: %+v, want an unrouted hand-back", c)
	}
	e.completer.flush([]completion{*c})
	applyDeferrals(t, e)
	if next, _ := floorOf(t, pool, keys[0]); next > time.Minute {
		t.Fatalf("the handed-back row waits %s although its route is loaded; want it due at once", next.Round(time.Second))
	}
}

// TestResumeWhilePausedRowLeased: the same interleaving for a pause: a
// claim sees the route paused and hands its row back a paused recheck (a
// minute) away, but the resume is read, and its wake applied, before that
// hand-back is written. The row must be woken again at once.
func TestResumeWhilePausedRowLeased(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ok := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		return dispatch.Result{Outcome: dispatch.Success}
	})
	e, err := New(pool, testRouting(t, map[string]dispatch.Adapter{"t": ok}, &Route{Tool: "t"}),
		Config{Workers: 2, Metrics: NewMetrics(prometheus.NewRegistry(), "test")})
	if err != nil {
		t.Fatal(err)
	}
	keys := enqueueN(t, pool, "run-q", "t", 1)
	ctx := t.Context()
	e.pauses.Store(&pauseSet{Routes: map[string]bool{"t": true}})
	rt := e.useRouting()
	rows, err := e.st.Claim(ctx, pool, store.Claim{Limit: 1, Lease: time.Minute, Replica: "test"})
	if err != nil || len(rows) != 1 {
		t.Fatalf("claim: %d rows, %v", len(rows), err)
	}
	_, _, c := e.preflight(&rows[0], rt)
	rt.done()
	if c == nil || c.waitsFor != outbox.RefusedPaused {
		t.Fatalf("preflight of a paused route's row: %+v, want a paused hand-back", c)
	}
	// The pause watcher reads the resume and wakes the route's rows; the
	// row is still leased.
	old := e.pauses.Swap(&pauseSet{})
	e.deferrer.wake(e.resumedTools(old, e.pauses.Load()))
	applyDeferrals(t, e)

	e.completer.flush([]completion{*c})
	applyDeferrals(t, e)
	if next, _ := floorOf(t, pool, keys[0]); next > 10*time.Second {
		t.Fatalf("the handed-back row waits %s although its route was resumed; want it due at once", next.Round(time.Second))
	}
}

// applyDeferrals applies, in order, every deferral and wake queued so far,
// as the deferrer's loop does.
func applyDeferrals(t *testing.T, e *Engine) {
	t.Helper()
	for {
		e.deferrer.mu.Lock()
		if len(e.deferrer.queue) == 0 {
			e.deferrer.mu.Unlock()
			return
		}
		req := e.deferrer.queue[0]
		e.deferrer.queue = e.deferrer.queue[1:]
		e.deferrer.mu.Unlock()
		e.deferrer.apply(t.Context(), req)
	}
}

// TestLastRetryAfterFloorKeptOnFailure: a row whose last allowed attempt is
// answered 429 with a Retry-After fails, and keeps that Retry-After as its
// floor, so that an operator's requeue of the failed row cannot send it
// before the provider allows.
func TestLastRetryAfterFloorKeptOnFailure(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	var limited atomic.Int64
	rt := testRouting(t, map[string]dispatch.Adapter{"a": retryAfterHour(&limited)}, &Route{Tool: "limited", Adapter: "a"})
	rt.Routes["limited"].MaxAttempts = 1
	rt.Routes["limited"].Backoff.MaxRetryAfter = 2 * time.Hour
	keys := enqueueN(t, pool, "run-f", "limited", 3)
	startEngine(t, pool, rt, Config{Workers: 4})
	testkit.WaitFor(t, 30*time.Second, "every row failed after its one attempt", func() (bool, string) {
		for _, k := range keys {
			if getRow(t, pool, k).Status != outbox.StatusFailed {
				return false, ""
			}
		}
		return true, ""
	})
	for _, k := range keys {
		if _, floor := floorOf(t, pool, k); floor < 50*time.Minute {
			t.Errorf("failed row %s keeps a floor %s from now; want the last answer's Retry-After (about an hour)", k, floor)
		}
	}
}

// TestStaleRefusalDoesNotUndoResume: a claim that saw a pause just before
// the resume was read reports a refusal that reaches the deferrer after the
// resume's wake; applying it must not push the woken rows back a minute.
// While the pause holds, the same refusal does defer them.
func TestStaleRefusalDoesNotUndoResume(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ok := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		return dispatch.Result{Outcome: dispatch.Success}
	})
	e, err := New(pool, testRouting(t, map[string]dispatch.Adapter{"a": ok}, &Route{Tool: "t", Adapter: "a"}),
		Config{Workers: 4, Metrics: NewMetrics(prometheus.NewRegistry(), "test")})
	if err != nil {
		t.Fatal(err)
	}
	keys := enqueueN(t, pool, "run-p", "t", 5)
	stale := deferral{tool: "t", reason: outbox.RefusedPaused, delay: pausedRecheck}

	e.pauses.Store(&pauseSet{}) // resumed
	e.deferrer.apply(t.Context(), stale)
	for _, k := range keys {
		if next, _ := floorOf(t, pool, k); next > time.Second {
			t.Fatalf("a refusal seen before the resume deferred row %s by %s after the resume", k, next)
		}
	}

	e.pauses.Store(&pauseSet{Adapters: map[string]bool{"a": true}}) // still paused
	e.deferrer.apply(t.Context(), stale)
	for _, k := range keys {
		if next, _ := floorOf(t, pool, k); next < 30*time.Second {
			t.Fatalf("a refusal while the adapter is paused left row %s due in %s; want about %s", k, next, pausedRecheck)
		}
	}
}
