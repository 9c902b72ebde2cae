package drainer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func unavailable(calls *atomic.Int64) dispatch.Adapter {
	return dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		calls.Add(1)
		return dispatch.Result{Outcome: dispatch.Retry, Status: 503, Err: errors.New("http 503")}
	})
}

// TestBreakerFailsFastWithoutConsumingAttempts: after 3 consecutive 503s the
// breaker opens; rows then go back to pending without a call and without
// consuming attempts, but for the probes, one at a time; they wait for the
// next probe, not for open_for (an hour here); the state is exported.
func TestBreakerFailsFastWithoutConsumingAttempts(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	var calls atomic.Int64
	enqueueN(t, pool, "run", "t", 10)
	rt := testRouting(t, map[string]dispatch.Adapter{"t": unavailable(&calls)}, &Route{Tool: "t", MaxAttempts: 100})
	rt.Policies = map[string]GatePolicy{"t": {BreakerFailures: 3, BreakerOpenFor: time.Hour}}
	var buf testkit.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	metrics := NewMetrics(prometheus.NewRegistry(), "test")
	e := startEngine(t, pool, rt, Config{Workers: 1, Metrics: metrics, Logger: log})
	// The probes go 1 s after the opening, then 2 s after the first.
	testkit.WaitFor(t, 30*time.Second, "two failed probes", func() (bool, string) {
		return len(logLines(buf.String(), "circuit breaker probe failed; breaker stays open")) >= 2, ""
	})
	if got := testutil.ToFloat64(metrics.DispatchTotal.WithLabelValues("t", "breaker_open")); got < 1 {
		t.Fatalf("no row turned away by the open breaker (drainer_dispatch_total{outcome=\"breaker_open\"} = %v)", got)
	}
	var heldLongest time.Duration
	if err := pool.QueryRow(t.Context(), "SELECT coalesce(max(next_attempt_at - now()), '0') FROM drainer.outbox WHERE status = 'pending'").Scan(&heldLongest); err != nil {
		t.Fatal(err)
	}
	if heldLongest > time.Minute {
		t.Fatalf("a row waits %v: rows turned away wait for the next probe (seconds here), not for open_for", heldLongest)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := e.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(metrics.CircuitBreakerState.WithLabelValues("t")); got == 0 {
		t.Fatal("drainer_circuit_breaker_state = 0 while the provider is down, want 2 (open) or 1 (probing)")
	}
	probes := len(logLines(buf.String(), "circuit breaker probe"))
	if n := calls.Load(); n != 3+int64(probes) {
		t.Fatalf("provider called %d times; an open breaker fails fast: the 3 failures and the %d probes only", n, probes)
	}
	var attempts int64
	if err := pool.QueryRow(t.Context(), "SELECT sum(attempts) FROM drainer.outbox").Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	if attempts != calls.Load() {
		t.Fatalf("rows consumed %d attempts in all; only the %d real calls may count", attempts, calls.Load())
	}
}

// TestBreakerHalfOpenProbeCloses: once open_for passes, one probe goes
// through; its success closes the breaker and the backlog drains.
func TestBreakerHalfOpenProbeCloses(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	var down atomic.Bool
	down.Store(true)
	var calls atomic.Int64
	a := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		calls.Add(1)
		if down.Load() {
			return dispatch.Result{Outcome: dispatch.Retry, Status: 529, Err: errors.New("http 529")}
		}
		return dispatch.Result{Outcome: dispatch.Success}
	})
	enqueueN(t, pool, "run", "t", 20)
	rt := testRouting(t, map[string]dispatch.Adapter{"t": a}, &Route{Tool: "t", MaxAttempts: 100})
	rt.Policies = map[string]GatePolicy{"t": {BreakerFailures: 2, BreakerOpenFor: 300 * time.Millisecond}}
	metrics := NewMetrics(prometheus.NewRegistry(), "test")
	startEngine(t, pool, rt, Config{Workers: 2, Metrics: metrics})
	testkit.WaitFor(t, 10*time.Second, "breaker open", func() (bool, string) {
		return testutil.ToFloat64(metrics.CircuitBreakerState.WithLabelValues("t")) == 2, ""
	})
	down.Store(false)
	testkit.WaitFor(t, 20*time.Second, "backlog drained after the probe", func() (bool, string) { return countByStatus(t, pool)["succeeded"] == 20, "" })
	if got := testutil.ToFloat64(metrics.CircuitBreakerState.WithLabelValues("t")); got != 0 {
		t.Fatalf("breaker state %v after recovery, want 0", got)
	}
}

// TestFallbackWhileBreakerOpen: a non-critical route goes to its fallback
// adapter while the primary's breaker is open, with the same key.
func TestFallbackWhileBreakerOpen(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	var primary atomic.Int64
	var mu sync.Mutex
	backupKeys := map[string]bool{}
	backup := dispatch.AdapterFunc(func(_ context.Context, m *dispatch.Message) dispatch.Result {
		mu.Lock()
		backupKeys[m.Key] = true
		mu.Unlock()
		return dispatch.Result{Outcome: dispatch.Success}
	})
	keys := enqueueN(t, pool, "run", "summarize", 10)
	rt := testRouting(t, map[string]dispatch.Adapter{"big": unavailable(&primary), "small": backup},
		&Route{Tool: "summarize", Adapter: "big", Critical: false, Fallback: "small", MaxAttempts: 100})
	rt.Policies = map[string]GatePolicy{"big": {BreakerFailures: 2, BreakerOpenFor: time.Hour}}
	startEngine(t, pool, rt, Config{Workers: 2})
	testkit.WaitFor(t, 10*time.Second, "rows succeeded through the fallback", func() (bool, string) { return countByStatus(t, pool)["succeeded"] == 10, "" })
	if primary.Load() > 3 {
		t.Fatalf("primary called %d times after its breaker opened", primary.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	for _, k := range keys[2:] {
		if !backupKeys[k] && primary.Load() == 2 {
			t.Fatalf("row %s did not reach the fallback with its key", k)
		}
	}
}

// TestPoisonProviderDoesNotStallOtherRoutes: a provider that hangs until
// timeout, capped by max_concurrency, leaves the other routes' workers free.
func TestPoisonProviderDoesNotStallOtherRoutes(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	var hanging, maxHanging atomic.Int64
	poison := dispatch.AdapterFunc(func(ctx context.Context, _ *dispatch.Message) dispatch.Result {
		n := hanging.Add(1)
		for {
			m := maxHanging.Load()
			if n <= m || maxHanging.CompareAndSwap(m, n) {
				break
			}
		}
		defer hanging.Add(-1)
		<-ctx.Done()
		return dispatch.Result{Outcome: dispatch.Ambiguous, Reason: "timeout", Err: ctx.Err()}
	})
	var fast atomic.Int64
	healthy := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		fast.Add(1)
		return dispatch.Result{Outcome: dispatch.Success}
	})
	enqueueN(t, pool, "poison-run", "slow_tool", 30)
	enqueueN(t, pool, "healthy-run", "fast_tool", 60)
	rt := testRouting(t, map[string]dispatch.Adapter{"slow_tool": poison, "fast_tool": healthy},
		&Route{Tool: "slow_tool"}, &Route{Tool: "fast_tool"})
	rt.Policies = map[string]GatePolicy{"slow_tool": {MaxConcurrency: 2}}
	startEngine(t, pool, rt, Config{Workers: 4, Lease: 30 * time.Second, LeaseMargin: time.Second})
	testkit.WaitFor(t, 15*time.Second, "healthy route drained while the poison one hangs", func() (bool, string) { return fast.Load() == 60, "" })
	if m := maxHanging.Load(); m > 2 {
		t.Fatalf("%d calls hung on the poison provider at once, want at most max_concurrency 2", m)
	}
}

// TestRateLimitSpacesCalls: rate_limit 20/s (burst 1) spreads 15 calls over
// at least 0.7 s, and turned-away rows consume no attempts (the rows never
// wait for their token here: GateWait -1).
func TestRateLimitSpacesCalls(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	rt, calls := rateLimited(t, pool, 15)
	startEngine(t, pool, rt, Config{Workers: 8, GateWait: -1})
	testkit.WaitFor(t, 15*time.Second, "rows drained", func() (bool, string) { return countByStatus(t, pool)["succeeded"] == 15, "" })
	times := calls()
	if span := times[len(times)-1].Sub(times[0]); span < 700*time.Millisecond {
		t.Fatalf("15 calls at 20/s took %v, want at least 0.7s", span)
	}
	if attempts := maxAttempts(t, pool); attempts != 1 {
		t.Fatalf("max attempts %d: rate-limited rows must not consume attempts", attempts)
	}
}

// rateLimited enqueues n rows of tool t, routed to an adapter limited to
// 20 calls a second with a burst of 1, and returns the routing and the
// times of the adapter's calls so far.
func rateLimited(t *testing.T, pool *pgxpool.Pool, n int) (*Routing, func() []time.Time) {
	t.Helper()
	var mu sync.Mutex
	var times []time.Time
	a := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		mu.Lock()
		times = append(times, time.Now())
		mu.Unlock()
		return dispatch.Result{Outcome: dispatch.Success}
	})
	enqueueN(t, pool, "run", "t", n)
	rt := testRouting(t, map[string]dispatch.Adapter{"t": a}, &Route{Tool: "t"})
	rt.Policies = map[string]GatePolicy{"t": {RatePerSecond: 20, Burst: 1}}
	return rt, func() []time.Time {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(times)
	}
}

// maxAttempts is the largest attempt count of the outbox's rows.
func maxAttempts(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var attempts int
	if err := pool.QueryRow(t.Context(), "SELECT max(attempts) FROM drainer.outbox").Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	return attempts
}

// TestOrderingPerBusinessScope: rows of one scope dispatch one at a time in
// enqueue order, while scopes proceed in parallel.
func TestOrderingPerBusinessScope(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	var mu sync.Mutex
	inScope := map[string]int{}
	seqs := map[string][]int64{}
	var overlap atomic.Int64
	var parallel, maxParallel atomic.Int64
	a := dispatch.AdapterFunc(func(_ context.Context, m *dispatch.Message) dispatch.Result {
		scope := m.Tuple.BusinessScope
		mu.Lock()
		inScope[scope]++
		if inScope[scope] > 1 {
			overlap.Add(1)
		}
		seqs[scope] = append(seqs[scope], m.Seq)
		mu.Unlock()
		n := parallel.Add(1)
		if n > maxParallel.Load() {
			maxParallel.Store(n)
		}
		time.Sleep(5 * time.Millisecond)
		parallel.Add(-1)
		mu.Lock()
		inScope[scope]--
		mu.Unlock()
		return dispatch.Result{Outcome: dispatch.Success}
	})
	ctx := t.Context()
	for i := range 10 {
		for _, scope := range []string{"acct:a", "acct:b", "acct:c"} {
			if _, err := pool.Exec(ctx, "SELECT drainer.enqueue($1, $2, 'ledger_post', $3, '{}')", "run-"+scope, "s"+itoa(i), scope); err != nil {
				t.Fatal(err)
			}
		}
	}
	startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"ledger_post": a}, &Route{Tool: "ledger_post", Ordering: "business_scope"}), Config{Workers: 8})
	testkit.WaitFor(t, 15*time.Second, "rows drained", func() (bool, string) { return countByStatus(t, pool)["succeeded"] == 30, "" })
	if overlap.Load() > 0 {
		t.Fatalf("%d dispatches overlapped another of the same scope", overlap.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	for scope, s := range seqs {
		for i := 1; i < len(s); i++ {
			if s[i] < s[i-1] {
				t.Fatalf("scope %s dispatched out of enqueue order: %v", scope, s)
			}
		}
	}
	if maxParallel.Load() < 2 {
		t.Fatalf("scopes never ran in parallel (max %d at once)", maxParallel.Load())
	}
}

// TestPauseRoute: rows of a paused route wait without consuming attempts and
// drain once it is resumed. A marker row of another route, enqueued after
// them, comes behind them in the claim order: once it succeeded, the
// claimer has gone past the paused rows.
func TestPauseRoute(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, "INSERT INTO drainer.pauses (target, name, paused_by, reason) VALUES ('route', 't', 'test', 'maintenance')"); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	a := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		calls.Add(1)
		return dispatch.Result{Outcome: dispatch.Success}
	})
	var marked atomic.Int64
	marker := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		marked.Add(1)
		return dispatch.Result{Outcome: dispatch.Success}
	})
	keys := enqueueN(t, pool, "run", "t", 5)
	enqueueN(t, pool, "run-marker", "marker", 1)
	startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"t": a, "marker": marker}, &Route{Tool: "t"}, &Route{Tool: "marker"}), Config{Workers: 2})
	testkit.WaitFor(t, 30*time.Second, "the marker row dispatched", func() (bool, string) { return marked.Load() == 1, "" })
	// Each paused row is deferred (looked at again in a minute) without an
	// attempt; one handed to a worker would end succeeded instead.
	testkit.WaitFor(t, 30*time.Second, "the paused rows deferred, no attempt consumed", func() (bool, string) {
		var states []string
		held := true
		for _, k := range keys {
			r := getRow(t, pool, k)
			states = append(states, fmt.Sprintf("%s/%d due in %s", r.Status, r.Attempts, r.DueIn.Round(time.Second)))
			held = held && r.Status == outbox.StatusPending && r.Attempts == 0 && r.DueIn > 10*time.Second
		}
		return held, strings.Join(states, ", ")
	})
	if calls.Load() != 0 {
		t.Fatalf("paused route dispatched %d rows", calls.Load())
	}
	if _, err := pool.Exec(ctx, "DELETE FROM drainer.pauses"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 15*time.Second, "rows drained after resume", func() (bool, string) {
		c := countByStatus(t, pool)
		return c["succeeded"] == len(keys)+1, fmt.Sprint(c) // and the marker
	})
}

// TestRefusedBacklogIsDeferredInBulk: 3,000 unrouted rows queued ahead of a
// routed tool's rows neither starve them nor churn: the first claim that
// meets them excludes their tool from claims until one bulk statement has
// deferred the whole unrouted backlog, so at most one claim batch of its rows
// is ever looked at one by one, however the claims and the deferral race.
func TestRefusedBacklogIsDeferredInBulk(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `SELECT drainer.enqueue('run-u' || g, 's', 'not_routed_yet', '', '{}') FROM generate_series(1, 3000) g`); err != nil {
		t.Fatal(err)
	}
	keys := enqueueN(t, pool, "run-r", "t", 50)
	metrics := NewMetrics(prometheus.NewRegistry(), "test")
	rt := testRouting(t, map[string]dispatch.Adapter{"t": dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		return dispatch.Result{Outcome: dispatch.Success}
	})}, &Route{Tool: "t"})
	rt.UnroutedRecheck = time.Minute
	eng := startEngine(t, pool, rt, Config{Workers: 8, Metrics: metrics})
	testkit.WaitFor(t, 30*time.Second, "routed rows drained", func() (bool, string) {
		for _, k := range keys {
			if getRow(t, pool, k).Status != outbox.StatusSucceeded {
				return false, ""
			}
		}
		return true, ""
	})
	due := func() int {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM drainer.outbox WHERE tool_name = 'not_routed_yet' AND next_attempt_at <= now()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	testkit.WaitFor(t, 30*time.Second, "unrouted backlog deferred", func() (bool, string) { return due() == 0, "" })
	batch := eng.Config().BatchSize
	looks := testutil.ToFloat64(metrics.DispatchTotal.WithLabelValues("", "unrouted"))
	var entries int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM drainer.audit a JOIN drainer.outbox o ON o.key = a.key
	        WHERE o.tool_name = 'not_routed_yet' AND a.event <> 'enqueued'`).Scan(&entries); err != nil {
		t.Fatal(err)
	}
	if looks > float64(batch) || entries > 2*batch {
		t.Fatalf("the unrouted backlog churned: %v rows looked at one by one, %d audit entries; want at most one claim batch (%d)", looks, entries, batch)
	}
	if looks < 1 {
		t.Fatalf("no unrouted row was looked at: the test did not exercise the deferral")
	}
}

// TestRateLimitKeepsItsRate: a route limited to 20 calls a second with a
// burst of 1 goes out at that rate whatever the poll: a row whose token
// comes within 3 s (gateWaitMax) waits for it in its worker. With a poll of a
// minute, 15 rows are sent, each once, spaced by the rate, none of them
// claimed by the poll. Before, rows turned away for their token waited
// for the next poll: with the default second, 15 rows took 14 s.
func TestRateLimitKeepsItsRate(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	start := time.Now() // before the limiter exists: its 15th token is free 0.7s after it, at the earliest
	rt, calls := rateLimited(t, pool, 15)
	e := startWithHooks(t, pool, rt, Config{Workers: 8}, wakeHooks{})
	testkit.WaitFor(t, wakeTestWait, "rows drained", func() (bool, string) { return countByStatus(t, pool)["succeeded"] == 15, "" })
	if got := e.ClaimedRows(); polled(e) != 0 {
		t.Fatalf("rows waited for the poll: claims by cause %v", got)
	}
	times := calls()
	if last := slices.MaxFunc(times, time.Time.Compare); len(times) != 15 || last.Sub(start) < 700*time.Millisecond {
		t.Fatalf("%d calls, the last %v after the limiter was made: want 15, the last at least 0.7s after (20/s)", len(times), last.Sub(start))
	}
	if attempts := maxAttempts(t, pool); attempts != 1 {
		t.Fatalf("max attempts %d: rows waiting for their token must not consume attempts", attempts)
	}
}

// capped enqueues n rows of tool t, routed to an adapter capped at limit
// calls under way whose calls take took, and returns the routing and the
// most calls it saw under way at once.
func capped(t *testing.T, pool *pgxpool.Pool, n, limit int, took time.Duration) (*Routing, func() int64) {
	t.Helper()
	var now, most atomic.Int64
	a := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		c := now.Add(1)
		for m := most.Load(); c > m && !most.CompareAndSwap(m, c); m = most.Load() {
		}
		time.Sleep(took)
		now.Add(-1)
		return dispatch.Result{Outcome: dispatch.Success}
	})
	enqueueN(t, pool, "run", "t", n)
	rt := testRouting(t, map[string]dispatch.Adapter{"t": a}, &Route{Tool: "t"})
	rt.Policies = map[string]GatePolicy{"t": {MaxConcurrency: limit}}
	return rt, most.Load
}

// TestMaxConcurrencyKeepsItsSlotsBusy: the rows of an adapter at its
// max_concurrency wait in their workers for a slot (gate.waitSlot) and go
// out as slots come free, whatever the poll: with a poll of a minute, 20
// rows capped at two calls are sent, each once, never more than two at a
// time, none turned away, none claimed by the poll. Before, the rows the
// cap turned away went back to pending and waited for the poll, which let
// about two through each time (20 rows did not drain in 3 minutes).
func TestMaxConcurrencyKeepsItsSlotsBusy(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	rt, most := capped(t, pool, 20, 2, 20*time.Millisecond)
	e := startWithHooks(t, pool, rt, Config{Workers: 8}, wakeHooks{})
	testkit.WaitFor(t, wakeTestWait, "rows drained", func() (bool, string) { return countByStatus(t, pool)["succeeded"] == 20, "" })
	if got := e.ClaimedRows(); polled(e) != 0 {
		t.Fatalf("rows waited for the poll: claims by cause %v", got)
	}
	if m := most(); m > 2 {
		t.Fatalf("%d calls under way at once, want at most max_concurrency 2", m)
	}
	if attempts := maxAttempts(t, pool); attempts != 1 {
		t.Fatalf("max attempts %d: rows waiting for a slot must not consume attempts", attempts)
	}
	var turned int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM drainer.audit WHERE reason = $1",
		fmt.Sprintf(noteRefusedFmt, refusalNote[outbox.RefusedSaturated])).Scan(&turned); err != nil {
		t.Fatal(err)
	}
	if turned != 0 {
		t.Fatalf("%d rows turned away at max_concurrency: with 8 workers and a cap of 2, six may wait for a slot", turned)
	}
}

// TestTurnedAwayRowsAreClaimedWhenDue: a row its adapter's gate turned
// away until a slot or a rate token comes free (it could not wait for it
// in its worker) is claimed when it comes due, woken by the engine that
// handed it back (retryWakes), not by the poll. Before, such rows waited
// for the poll: with a poll of a minute, these did not drain in 3 minutes.
func TestTurnedAwayRowsAreClaimedWhenDue(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		reason outbox.Refusal
		rt     func(t *testing.T, pool *pgxpool.Pool) *Routing
		wait   time.Duration
	}{
		{"rate token", outbox.RefusedRateLimited, func(t *testing.T, pool *pgxpool.Pool) *Routing {
			rt, _ := rateLimited(t, pool, 10)
			return rt
		}, -1},
		{"slot", outbox.RefusedSaturated, func(t *testing.T, pool *pgxpool.Pool) *Routing {
			rt, _ := capped(t, pool, 10, 1, 100*time.Millisecond)
			return rt
		}, 30 * time.Millisecond}, // shorter than a call: rows waiting for the slot are turned away
	} {
		t.Run(c.name, func(t *testing.T) {
			pool := newPool(t)
			e := startWithHooks(t, pool, c.rt(t, pool), Config{Workers: 8, GateWait: c.wait}, wakeHooks{})
			testkit.WaitFor(t, wakeTestWait, "rows drained", func() (bool, string) { return countByStatus(t, pool)["succeeded"] == 10, "" })
			if got := e.ClaimedRows(); polled(e) != 0 {
				t.Fatalf("rows waited for the poll: claims by cause %v", got)
			}
			var turned int
			if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM drainer.audit WHERE reason = $1",
				fmt.Sprintf(noteRefusedFmt, refusalNote[c.reason])).Scan(&turned); err != nil {
				t.Fatal(err)
			}
			if turned == 0 {
				t.Fatal("no row was turned away: the test no longer tests rows handed back")
			}
		})
	}
}

// TestHeldRowsGoWhenTheProviderAnswers: rows held back while an adapter's
// breaker is open, or while the provider refuses the credentials (an auth
// hold), go out once a recheck gets an answer, whatever the poll: the
// deferral wakes its replica when its first row comes due (the recheck),
// and the recheck's answer wakes the others. With a poll of a minute, 20
// rows drain with no claim by the poll; before, each took a poll or two
// (1 min 58 s for the breaker).
func TestHeldRowsGoWhenTheProviderAnswers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		down   dispatch.Result
		policy GatePolicy
	}{
		{"breaker", dispatch.Result{Outcome: dispatch.Retry, Status: 503, Err: errors.New("http 503")},
			GatePolicy{BreakerFailures: 3, BreakerOpenFor: 2 * time.Second}},
		{"auth hold", dispatch.Result{Outcome: dispatch.Auth, Status: 401, Err: errors.New("http 401")}, GatePolicy{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			pool := newPool(t)
			var up atomic.Bool
			var refused atomic.Int64
			a := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
				if !up.Load() {
					refused.Add(1)
					return c.down
				}
				return dispatch.Result{Outcome: dispatch.Success}
			})
			enqueueN(t, pool, "run", "t", 20)
			rt := testRouting(t, map[string]dispatch.Adapter{"t": a}, &Route{Tool: "t", MaxAttempts: 50})
			rt.Policies = map[string]GatePolicy{"t": c.policy}
			e := startWithHooks(t, pool, rt, Config{Workers: 8}, wakeHooks{})
			testkit.WaitFor(t, wakeTestWait, "the provider refused", func() (bool, string) { return refused.Load() >= 3, "" })
			up.Store(true)
			testkit.WaitFor(t, wakeTestWait, "rows drained", func() (bool, string) { return countByStatus(t, pool)["succeeded"] == 20, "" })
			if got := e.ClaimedRows(); polled(e) != 0 {
				t.Fatalf("held rows waited for the poll: claims by cause %v", got)
			}
		})
	}
}

// TestAuthHeldRowsWakeEveryReplica: the credentials of one replica are
// refused, those of the other are not (each replica holds its own). The
// row the provider refused comes due at its replica's recheck; it and the
// rows that replica's gate turns away meanwhile wake both replicas when
// due, so whichever takes them takes them on a wake-up, not by its poll (a
// minute here). Before, the refused row woke nobody (its attempt is given
// back) and waited for a poll.
func TestAuthHeldRowsWakeEveryReplica(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	var calls atomic.Int64
	a := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		if calls.Add(1) == 1 {
			return dispatch.Result{Outcome: dispatch.Auth, Status: 401, Err: errors.New("http 401")}
		}
		return dispatch.Result{Outcome: dispatch.Success}
	})
	var engines []*Engine
	for range 2 {
		rt := testRouting(t, map[string]dispatch.Adapter{"t": a}, &Route{Tool: "t", MaxAttempts: 50})
		engines = append(engines, startWithHooks(t, pool, rt, Config{Workers: 8}, wakeHooks{}))
	}
	first := enqueueN(t, pool, "first", "t", 1)[0]
	testkit.WaitFor(t, wakeTestWait, "the provider refused the credentials", func() (bool, string) { return calls.Load() >= 1, "" })
	enqueueN(t, pool, "then", "t", 4)
	testkit.WaitFor(t, wakeTestWait, "rows drained", func() (bool, string) {
		n := countByStatus(t, pool)["succeeded"]
		return n == 5, fmt.Sprintf("%d of 5 succeeded", n)
	})
	if r := getRow(t, pool, first); r.Attempts != 1 {
		t.Fatalf("the refused row: %d attempts, want 1 (the refusal consumes none)", r.Attempts)
	}
	for i, e := range engines {
		if polled(e) != 0 {
			t.Fatalf("replica %d took held rows by its poll: claims by cause %v", i, e.ClaimedRows())
		}
	}
}
