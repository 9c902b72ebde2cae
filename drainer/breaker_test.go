package drainer

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// testClock is a clock that moves only when told to.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock() *testClock { return &testClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// openBreaker returns a breaker of failures 3 and the given open_for,
// opened by three failures at the clock's time.
func openBreaker(t *testing.T, clk *testClock, openFor time.Duration) *breaker {
	t.Helper()
	b := newBreaker(3, openFor, clk.now, nil)
	for range 3 {
		done, _, ok := b.allow("r")
		if !ok {
			t.Fatal("closed breaker refused a request")
		}
		done(verdictFailure)
	}
	if s := b.current(); s != breakerOpen {
		t.Fatalf("after 3 failures: %v, want open", s)
	}
	return b
}

// probeAfter checks that b refuses until wait has passed (saying how long
// is left) and lets one probe through at wait; it returns the probe's done.
func probeAfter(t *testing.T, clk *testClock, b *breaker, wait time.Duration) func(verdict) {
	t.Helper()
	clk.advance(wait - time.Millisecond)
	if _, left, ok := b.allow("r"); ok || left != time.Millisecond {
		t.Fatalf("%v before the probe is due: allowed %v, retry in %v; want refused, 1ms", wait-time.Millisecond, ok, left)
	}
	clk.advance(time.Millisecond)
	done, _, ok := b.allow("r")
	if !ok {
		t.Fatalf("no probe after a wait of %v", wait)
	}
	if s := b.current(); s != breakerHalfOpen {
		t.Fatalf("probe under way: %v, want half-open", s)
	}
	return done
}

// TestBreakerProbeSchedule: once open, the first probe goes after 1 s (or
// open_for if shorter), each failed probe doubles the wait up to open_for,
// and a success closes the breaker and starts the schedule over.
func TestBreakerProbeSchedule(t *testing.T) {
	t.Parallel()
	clk := newTestClock()
	b := openBreaker(t, clk, 10*time.Second)
	for _, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second} {
		done := probeAfter(t, clk, b, wait)
		done(verdictFailure)
		if s := b.current(); s != breakerOpen {
			t.Fatalf("failed probe after %v: %v, want open", wait, s)
		}
	}
	done := probeAfter(t, clk, b, 10*time.Second)
	done(verdictSuccess)
	if s := b.current(); s != breakerClosed {
		t.Fatalf("successful probe: %v, want closed", s)
	}
	// Closed: requests go out, and two failures do not open it again.
	for range 2 {
		d, _, ok := b.allow("r")
		if !ok {
			t.Fatal("closed breaker refused a request")
		}
		d(verdictFailure)
	}
	if s := b.current(); s != breakerClosed {
		t.Fatalf("2 failures after closing: %v, want closed (the run starts over)", s)
	}
	d, _, _ := b.allow("r")
	d(verdictFailure)
	probeAfter(t, clk, b, time.Second)(verdictFailure) // the schedule starts over too
	probeAfter(t, clk, b, 2*time.Second)(verdictSuccess)

	// open_for shorter than a second: every wait is open_for.
	short := openBreaker(t, clk, 300*time.Millisecond)
	for range 3 {
		probeAfter(t, clk, short, 300*time.Millisecond)(verdictFailure)
	}
}

// TestBreakerOneProbeAtATime: while a probe is under way every other
// request is refused (retry in 0: the probe's answer decides); a neutral
// probe lets the next request probe at once; a probe that never answers
// stops blocking after breakerProbeLost, and its late verdict is ignored.
func TestBreakerOneProbeAtATime(t *testing.T) {
	t.Parallel()
	clk := newTestClock()
	b := openBreaker(t, clk, time.Minute)
	probe := probeAfter(t, clk, b, time.Second)
	for range 5 {
		if _, left, ok := b.allow("r"); ok || left != 0 {
			t.Fatalf("second request while a probe is under way: allowed %v, retry in %v; want refused, 0", ok, left)
		}
	}
	probe(verdictNeutral)
	if s := b.current(); s != breakerHalfOpen {
		t.Fatalf("after a neutral probe: %v, want half-open", s)
	}
	lost, _, ok := b.allow("r")
	if !ok {
		t.Fatal("after a neutral probe the next request must probe")
	}
	if _, _, ok := b.allow("r"); ok {
		t.Fatal("two probes under way")
	}
	clk.advance(breakerProbeLost)
	again, _, ok := b.allow("r")
	if !ok {
		t.Fatalf("a probe without an answer for %v still blocks the others", breakerProbeLost)
	}
	lost(verdictSuccess) // too late: the second probe decides
	if s := b.current(); s != breakerHalfOpen {
		t.Fatalf("a lost probe's late answer changed the state to %v", s)
	}
	again(verdictFailure)
	if s := b.current(); s != breakerOpen {
		t.Fatalf("failed probe: %v, want open", s)
	}
	// Two failed probes so far (the neutral one does not count): 4 s.
	probeAfter(t, clk, b, 2*time.Second)(verdictSuccess)
}

// TestBreakerIgnoresVerdictsFromBeforeItsState: an answer to a request sent
// while the breaker was closed, arriving after it opened, does not close it;
// a failure sent before it closed does not count toward the next opening.
func TestBreakerIgnoresVerdictsFromBeforeItsState(t *testing.T) {
	t.Parallel()
	clk := newTestClock()
	b := newBreaker(2, time.Minute, clk.now, nil)
	slow, _, _ := b.allow("r")
	for range 2 {
		d, _, _ := b.allow("r")
		d(verdictFailure)
	}
	slow(verdictSuccess)
	if s := b.current(); s != breakerOpen {
		t.Fatalf("an answer older than the opening changed the state to %v", s)
	}
	probe := probeAfter(t, clk, b, time.Second)
	probe(verdictSuccess)
	d, _, _ := b.allow("r")
	d(verdictFailure)
	d(verdictFailure) // reported twice: counted once
	if s := b.current(); s != breakerClosed {
		t.Fatalf("one failure reported twice opened the breaker: %v", s)
	}
}

// gateLog is a gate whose breaker runs on clk, logging at level into buf.
func gateLog(clk *testClock, level slog.Level, buf *testkit.Buffer, m *Metrics) *gate {
	log := slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: level}))
	return newGateWithClock("pay", GatePolicy{BreakerFailures: 2, BreakerOpenFor: 30 * time.Second}, m, log, clk.now)
}

// TestBreakerLogsOpenAndCloseOnce: an outage with several failed probes is
// one log line when the breaker opens and one when it closes, each naming
// the adapter, the route whose answer caused it and what the rows do; the
// gauge reads 2 while open, 1 while a probe is under way, 0 once closed.
func TestBreakerLogsOpenAndCloseOnce(t *testing.T) {
	t.Parallel()
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		t.Run(level.String(), func(t *testing.T) {
			clk := newTestClock()
			var buf testkit.Buffer
			m := NewMetrics(prometheus.NewRegistry(), "test")
			g := gateLog(clk, level, &buf, m)
			r := rand.New(rand.NewPCG(1, 2))
			gauge := func() float64 { return testutil.ToFloat64(m.CircuitBreakerState.WithLabelValues("pay")) }
			down := dispatch.Result{Outcome: dispatch.Retry, Status: 503}
			up := dispatch.Result{Outcome: dispatch.Success, Status: 200}
			for range 2 {
				done, ref := g.admit(r, "charge")
				if ref != nil {
					t.Fatalf("refused before the breaker opened: %+v", ref)
				}
				done(down)
			}
			if gauge() != 2 {
				t.Fatalf("gauge %v after opening, want 2", gauge())
			}
			for i, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
				if _, ref := g.admit(r, "charge"); ref == nil || ref.reason != outbox.RefusedBreakerOpen {
					t.Fatalf("probe %d: a row went out before the probe was due: %+v", i, ref)
				} else if ref.delay < wait || ref.delay > wait*2 {
					t.Fatalf("probe %d: row turned away for %v; want it back about when the probe is due (%v)", i, ref.delay, wait)
				}
				clk.advance(wait)
				done, ref := g.admit(r, "charge")
				if ref != nil {
					t.Fatalf("probe %d after %v refused: %+v", i, wait, ref)
				}
				if gauge() != 1 {
					t.Fatalf("gauge %v while probing, want 1", gauge())
				}
				if i < 2 {
					done(down)
				} else {
					done(up)
				}
			}
			if gauge() != 0 {
				t.Fatalf("gauge %v after a successful probe, want 0", gauge())
			}
			out := buf.String()
			opened := logLines(out, breakerOpenedMsg)
			if len(opened) != 1 || opened[0]["adapter"] != "pay" || opened[0]["route"] != "charge" || opened[0]["next_probe_in"] != float64(time.Second) {
				t.Errorf("opening logged as %v, want once, naming adapter, route and the first probe's wait:\n%s", opened, out)
			}
			closed := logLines(out, breakerClosedMsg)
			if len(closed) != 1 || closed[0]["adapter"] != "pay" || closed[0]["route"] != "charge" ||
				closed[0]["failed_probes"] != float64(2) || closed[0]["open_for"] != float64(7*time.Second) {
				t.Errorf("closing logged as %v, want once, naming adapter, route, failed probes and how long it was open:\n%s", closed, out)
			}
			want := 2
			if level == slog.LevelDebug {
				want += 3 + 2 // three probes, two failed
			}
			if n := strings.Count(out, "\n"); n != want {
				t.Errorf("%d log lines at %v, want %d:\n%s", n, level, want, out)
			}
		})
	}
}

// The breaker's two log lines at Info and above.
const (
	breakerOpenedMsg = "circuit breaker opened: the provider looks down; its rows wait without consuming attempts (routes with a fallback use it) until a probe succeeds"
	breakerClosedMsg = "circuit breaker closed: the provider answers again; its rows go out"
)

// logLines returns the JSON log lines of out whose message is msg.
func logLines(out, msg string) []map[string]any {
	var lines []map[string]any
	for line := range strings.SplitSeq(out, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == msg {
			lines = append(lines, m)
		}
	}
	return lines
}

// TestBreakerRecoversWithinSeconds: a provider that drops every request for
// a while (a restart under load) opens the breaker; once it answers again
// its backlog drains within seconds, although open_for is an hour.
func TestBreakerRecoversWithinSeconds(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	var down atomic.Bool
	down.Store(true)
	var calls atomic.Int64
	a := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		calls.Add(1)
		if down.Load() {
			return dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Err: errors.New("dial tcp: connection refused")}
		}
		return dispatch.Result{Outcome: dispatch.Success, Status: 200}
	})
	enqueueN(t, pool, "run", "t", 20)
	rt := testRouting(t, map[string]dispatch.Adapter{"t": a}, &Route{Tool: "t", MaxAttempts: 100})
	rt.Policies = map[string]GatePolicy{"t": {BreakerFailures: 3, BreakerOpenFor: time.Hour}}
	metrics := NewMetrics(prometheus.NewRegistry(), "test")
	startEngine(t, pool, rt, Config{Workers: 2, Metrics: metrics})
	testkit.WaitFor(t, 30*time.Second, "breaker open", func() (bool, string) {
		return testutil.ToFloat64(metrics.CircuitBreakerState.WithLabelValues("t")) == 2, ""
	})
	down.Store(false)
	// An hour-long open_for would hold the rows for an hour; the first
	// probes go after 1 s, 2 s, 4 s.
	testkit.WaitFor(t, 30*time.Second, "backlog drained after the provider came back", func() (bool, string) {
		return countByStatus(t, pool)["succeeded"] == 20, ""
	})
	if got := testutil.ToFloat64(metrics.CircuitBreakerState.WithLabelValues("t")); got != 0 {
		t.Fatalf("breaker state %v after recovery, want 0", got)
	}
}

// TestBreakerVerdicts: what an attempt's result says of its provider. A
// refusal of the request alone (a serialization failure, a full stream:
// the provider answered) leaves the breaker alone, so one row's conflicts
// never hold the adapter's other rows; a refusal that says the provider
// is down counts as a 503 does.
func TestBreakerVerdicts(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	cases := []struct {
		name string
		res  dispatch.Result
		want verdict
	}{
		{"2xx", dispatch.Result{Outcome: dispatch.Success, Status: 200}, verdictSuccess},
		{"503", dispatch.Result{Outcome: dispatch.Retry, Status: 503, Err: boom}, verdictFailure},
		{"429", dispatch.Result{Outcome: dispatch.Retry, Status: 429, Err: boom}, verdictNeutral},
		{"connection refused", dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Reason: dispatch.ReasonConnect, Err: boom}, verdictFailure},
		{"timeout", dispatch.Result{Outcome: dispatch.Ambiguous, Reason: dispatch.ReasonTimeout, Err: boom}, verdictFailure},
		{"serialization failure refused", dispatch.Result{Outcome: dispatch.Retry, Refused: true, Reason: "tx_conflict", Err: boom}, verdictNeutral},
		{"server out of connections", dispatch.Result{Outcome: dispatch.Retry, Refused: true, Down: true, Reason: "db_unavailable", Err: boom}, verdictFailure},
		{"cancelled", dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Reason: dispatch.ReasonCancelled, Err: boom}, verdictNeutral},
		{"not ready", dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Reason: dispatch.ReasonNotReady, Err: boom}, verdictNeutral},
		{"missing topic or stream", dispatch.Result{Outcome: dispatch.Retry, NotSent: true, AwaitsFix: true, Reason: "unknown_topic", Err: boom}, verdictNeutral},
	}
	for _, c := range cases {
		if got := breakerVerdict(c.res, false); got != c.want {
			t.Errorf("%s: verdict %v, want %v", c.name, got, c.want)
		}
	}
}
