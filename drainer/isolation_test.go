package drainer

import (
	"context"
	"encoding/json"
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

// answerLog records, per key, the HTTP status of every answer a test
// provider gave (0: no answer), in order.
type answerLog struct {
	mu    sync.Mutex
	byKey map[string][]int
}

func (l *answerLog) add(key string, status int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byKey == nil {
		l.byKey = map[string][]int{}
	}
	l.byKey[key] = append(l.byKey[key], status)
}

func (l *answerLog) of(key string) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.byKey[key])
}

func (l *answerLog) count(status int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.byKey {
		for _, x := range s {
			if x == status {
				n++
			}
		}
	}
	return n
}

// auditEntry is one entry of a key's audit chain.
type auditEntry struct {
	Event, From, To string
	Status          *int
	Reason          *string
}

func auditOf(t testing.TB, pool *pgxpool.Pool, key string) []auditEntry {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT event, coalesce(from_status, ''), coalesce(to_status, ''), response_status, reason
		FROM drainer.audit WHERE key = $1 ORDER BY id`, key)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []auditEntry
	for rows.Next() {
		var e auditEntry
		if err := rows.Scan(&e.Event, &e.From, &e.To, &e.Status, &e.Reason); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkAuditRecordsAnswers: the entries of key that record an answer are
// exactly the provider's answers to it, in order; every other entry that
// ends a claim records none and says why.
func checkAuditRecordsAnswers(t testing.TB, pool *pgxpool.Pool, answers *answerLog, key string) {
	t.Helper()
	entries := auditOf(t, pool, key)
	var recorded, sent []int
	for _, s := range answers.of(key) {
		if s > 0 {
			sent = append(sent, s)
		}
	}
	for _, e := range entries {
		if e.Status != nil {
			recorded = append(recorded, *e.Status)
			continue
		}
		if outbox.Status(e.From) == outbox.StatusInFlight && outbox.Status(e.To) == outbox.StatusPending && (e.Reason == nil || *e.Reason == "") {
			t.Errorf("key %s: an entry ending a claim without an answer gives no reason: %+v", key, e)
		}
	}
	if !slices.Equal(recorded, sent) {
		js, _ := json.Marshal(entries)
		t.Fatalf("key %s: audit entries record answers %v, the provider gave %v; entries: %s", key, recorded, sent, js)
	}
}

// countLines counts the JSON log lines with message msg whose attributes
// include every attr.
func countLines(out, msg string, attrs map[string]string) int {
	n := 0
	for line := range strings.SplitSeq(out, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m["msg"] != msg {
			continue
		}
		ok := true
		for k, v := range attrs {
			if fmt.Sprint(m[k]) != v {
				ok = false
			}
		}
		if ok {
			n++
		}
	}
	return n
}

func stateOf(e *Engine, adapter string) AdapterState {
	for _, s := range e.AdapterStates() {
		if s.Adapter == adapter {
			return s
		}
	}
	return AdapterState{}
}

func holdRoutes(s AdapterState) []string {
	var r []string
	for _, h := range s.Holds {
		r = append(r, h.Route)
	}
	return r
}

// TestAuthRefusalHoldsOnlyItsRoute: the provider refuses the credentials on
// route a of adapter x and accepts them on route b. Only a is held: b's rows
// drain while a's wait with no attempt consumed, the breaker does not open
// on one route's refusals, the hold is logged once when it starts and once
// when it ends, and once the provider accepts a's requests they drain.
// Before, the whole adapter was held and a's refusals opened its breaker,
// so b's rows waited an open_for (here an hour).
func TestAuthRefusalHoldsOnlyItsRoute(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	var fixed atomic.Bool
	var answers answerLog
	var aCalls atomic.Int64
	x := dispatch.AdapterFunc(func(_ context.Context, m *dispatch.Message) dispatch.Result {
		if m.Tuple.ToolName == "a" {
			aCalls.Add(1)
			if !fixed.Load() {
				answers.add(m.Key, 401)
				return dispatch.Result{Outcome: dispatch.Auth, Status: 401, Reason: dispatch.ReasonAuth, Err: errors.New("http 401")}
			}
		}
		answers.add(m.Key, 200)
		return dispatch.Result{Outcome: dispatch.Success, Status: 200}
	})
	rt := testRouting(t, map[string]dispatch.Adapter{"x": x}, &Route{Tool: "a", Adapter: "x"}, &Route{Tool: "b", Adapter: "x"})
	rt.Policies = map[string]GatePolicy{"x": {BreakerFailures: 3, BreakerOpenFor: time.Hour}}
	var buf testkit.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	metrics := NewMetrics(prometheus.NewRegistry(), "test")
	aKeys := enqueueN(t, pool, "run-a", "a", 5)
	e := startEngine(t, pool, rt, Config{Workers: 4, Logger: log, Metrics: metrics})
	testkit.WaitFor(t, 30*time.Second, "route a held", func() (bool, string) { return slices.Contains(holdRoutes(stateOf(e, "x")), "a"), "" })

	// b's rows, enqueued while a is held, all go out; a's still wait.
	bKeys := enqueueN(t, pool, "run-b", "b", 20)
	testkit.WaitFor(t, 30*time.Second, "b's rows drained", func() (bool, string) {
		for _, k := range bKeys {
			if getRow(t, pool, k).Status != outbox.StatusSucceeded {
				return false, ""
			}
		}
		return true, ""
	})
	st := stateOf(e, "x")
	if !st.Ready || !slices.Equal(holdRoutes(st), []string{"a"}) {
		t.Fatalf("adapter x while only route a is refused: %+v; want ready, route a held", st)
	}
	if got := testutil.ToFloat64(metrics.CircuitBreakerState.WithLabelValues("x")); got != 0 {
		t.Fatalf("breaker state %v: one route's auth refusals must not open the adapter's breaker", got)
	}
	// A held route is probed now and then (one of its rows sent, its
	// attempt given back on the refusal), so a row of a may be in flight
	// at any moment on a slow machine: each is read until it is back from
	// its probe, and is never found with an attempt consumed.
	for _, k := range aKeys {
		testkit.WaitFor(t, time.Minute, "held row of a back from its probe", func() (bool, string) {
			r := getRow(t, pool, k)
			if r.Status == outbox.StatusInFlight {
				return false, fmt.Sprintf("%+v", r)
			}
			if r.Status != outbox.StatusPending || r.Attempts != 0 {
				t.Fatalf("held row of a: %+v; want pending with no attempt consumed", r)
			}
			return true, ""
		})
	}
	// Held, not spun: a's rows are not sent once a second each.
	if n := aCalls.Load(); n > 15 {
		t.Fatalf("route a was called %d times while held; held rows must wait, not be sent again and again", n)
	}

	fixed.Store(true)
	testkit.WaitFor(t, 5*time.Minute, "a's rows drained once the credentials are accepted", func() (bool, string) {
		for _, k := range aKeys {
			if getRow(t, pool, k).Status != outbox.StatusSucceeded {
				return false, ""
			}
		}
		return true, ""
	})
	for _, k := range aKeys {
		if r := getRow(t, pool, k); r.Attempts != 1 {
			t.Fatalf("row of a drained with %d attempts; the refusals consume none, the success one", r.Attempts)
		}
		checkAuditRecordsAnswers(t, pool, &answers, k)
	}
	testkit.WaitFor(t, 10*time.Second, "the hold's end logged", func() (bool, string) {
		return countLines(buf.String(), "auth hold ended: the provider accepted the credentials", map[string]string{"adapter": "x", "route": "a"}) >= 1, ""
	})
	out := buf.String()
	if n := countLines(out, "auth hold started: the provider refused the credentials; rows wait without consuming attempts", map[string]string{"adapter": "x", "route": "a"}); n != 1 {
		t.Errorf("hold start of route a logged %d times, want once:\n%s", n, out)
	}
	if n := countLines(out, "auth hold ended: the provider accepted the credentials", map[string]string{"adapter": "x", "route": "a"}); n != 1 {
		t.Errorf("hold end of route a logged %d times, want once:\n%s", n, out)
	}
	if strings.Contains(out, `"route":"*"`) || strings.Contains(out, `"route":"b"`) {
		t.Errorf("a hold of the adapter or of route b was logged; only a was refused:\n%s", out)
	}
}

// TestSeveralRoutesRefusedHoldTheAdapter: refused on two routes, adapter x
// is held as a whole (its third route waits too), not ready, and says so in
// drainer_adapter_ready, drainer_hold_seconds and AdapterStates; its first
// accepted request ends the hold, logged once.
func TestSeveralRoutesRefusedHoldTheAdapter(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	var fixed atomic.Bool
	var cCalls atomic.Int64
	x := dispatch.AdapterFunc(func(_ context.Context, m *dispatch.Message) dispatch.Result {
		if m.Tuple.ToolName == "c" {
			cCalls.Add(1)
		}
		if !fixed.Load() && m.Tuple.ToolName != "c" {
			return dispatch.Result{Outcome: dispatch.Auth, Status: 403, Reason: dispatch.ReasonAuth, Err: errors.New("http 403")}
		}
		return dispatch.Result{Outcome: dispatch.Success, Status: 200}
	})
	y := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		return dispatch.Result{Outcome: dispatch.Success, Status: 200}
	})
	rt := testRouting(t, map[string]dispatch.Adapter{"x": x, "y": y},
		&Route{Tool: "a", Adapter: "x"}, &Route{Tool: "b", Adapter: "x"}, &Route{Tool: "c", Adapter: "x"}, &Route{Tool: "d", Adapter: "y"})
	var buf testkit.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg, "test")
	enqueueN(t, pool, "run-a", "a", 2)
	e := startEngine(t, pool, rt, Config{Workers: 4, Logger: log, Metrics: metrics})
	testkit.WaitFor(t, 30*time.Second, "route a held", func() (bool, string) { return slices.Contains(holdRoutes(stateOf(e, "x")), "a"), "" })
	if st := stateOf(e, "x"); !st.Ready {
		t.Fatalf("one route refused of three: %+v; the adapter must stay ready", st)
	}
	enqueueN(t, pool, "run-b", "b", 2)
	testkit.WaitFor(t, 30*time.Second, "adapter x held", func() (bool, string) { return slices.Contains(holdRoutes(stateOf(e, "x")), wholeAdapter), "" })
	if st := stateOf(e, "x"); st.Ready || !strings.Contains(st.Reason, "credentials") {
		t.Fatalf("two routes refused alike: %+v; want adapter x not ready for its credentials", st)
	}
	if st := stateOf(e, "y"); !st.Ready || len(st.Holds) != 0 {
		t.Fatalf("adapter y: %+v; another adapter's refusals must not touch it", st)
	}
	expo := `
# HELP drainer_adapter_ready 1 when the adapter can send, 0 while its circuit breaker is open (or half-open) or it is held after refusing the credentials on several routes; its rows wait, other adapters drain.
# TYPE drainer_adapter_ready gauge
drainer_adapter_ready{adapter="x"} 0
drainer_adapter_ready{adapter="y"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expo), "drainer_adapter_ready"); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// Every route and adapter has a series, 0 while not held.
	var holds, held []string
	for _, mf := range mfs {
		if mf.GetName() != "drainer_hold_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var l []string
			for _, lp := range m.GetLabel() {
				l = append(l, lp.GetName()+"="+lp.GetValue())
			}
			holds = append(holds, strings.Join(l, ","))
			switch v := m.GetGauge().GetValue(); {
			case v < 0:
				t.Errorf("negative hold age: %v", m)
			case v > 0:
				held = append(held, strings.Join(l, ","))
			}
		}
	}
	slices.Sort(holds)
	slices.Sort(held)
	if !slices.Equal(holds, []string{"adapter=x,route=*", "adapter=x,route=a", "adapter=x,route=b", "adapter=x,route=c", "adapter=y,route=*", "adapter=y,route=d"}) {
		t.Fatalf("drainer_hold_seconds series %v; want one per route and adapter", holds)
	}
	if !slices.Equal(held, []string{"adapter=x,route=*", "adapter=x,route=a", "adapter=x,route=b"}) {
		t.Fatalf("drainer_hold_seconds above 0 for %v; want x's routes a, b and the whole adapter", held)
	}

	fixed.Store(true)
	testkit.WaitFor(t, 5*time.Minute, "every row drained and the holds ended", func() (bool, string) {
		return countByStatus(t, pool)["succeeded"] == 4 && len(stateOf(e, "x").Holds) == 0, ""
	})
	out := buf.String()
	for _, r := range []string{"a", "b", wholeAdapter} {
		if n := countLines(out, "auth hold started: the provider refused the credentials; rows wait without consuming attempts", map[string]string{"adapter": "x", "route": r}); n != 1 {
			t.Errorf("hold start of route %s logged %d times, want once:\n%s", r, n, out)
		}
		if n := countLines(out, "auth hold ended: the provider accepted the credentials", map[string]string{"adapter": "x", "route": r}); n != 1 {
			t.Errorf("hold end of route %s logged %d times, want once:\n%s", r, n, out)
		}
	}
	if st := stateOf(e, "x"); !st.Ready {
		t.Fatalf("adapter x after the credentials were accepted: %+v; want ready", st)
	}
}

// TestBreakerOpenAndCloseLoggedOnce: an outage opens the breaker and its end
// closes it; each transition is one log line naming the adapter.
func TestBreakerOpenAndCloseLoggedOnce(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	var down atomic.Bool
	down.Store(true)
	x := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		if down.Load() {
			return dispatch.Result{Outcome: dispatch.Retry, Status: 503, Err: errors.New("http 503")}
		}
		return dispatch.Result{Outcome: dispatch.Success, Status: 200}
	})
	rt := testRouting(t, map[string]dispatch.Adapter{"x": x}, &Route{Tool: "t", Adapter: "x", MaxAttempts: 100})
	rt.Policies = map[string]GatePolicy{"x": {BreakerFailures: 3, BreakerOpenFor: 500 * time.Millisecond}}
	var buf testkit.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	metrics := NewMetrics(prometheus.NewRegistry(), "test")
	enqueueN(t, pool, "run", "t", 10)
	startEngine(t, pool, rt, Config{Workers: 2, Logger: log, Metrics: metrics})
	testkit.WaitFor(t, 30*time.Second, "breaker open", func() (bool, string) {
		return testutil.ToFloat64(metrics.CircuitBreakerState.WithLabelValues("x")) == 2, ""
	})
	down.Store(false)
	testkit.WaitFor(t, 60*time.Second, "rows drained", func() (bool, string) { return countByStatus(t, pool)["succeeded"] == 10, "" })
	out := buf.String()
	if n := countLines(out, breakerOpenedMsg, map[string]string{"adapter": "x", "route": "t"}); n != 1 {
		t.Errorf("breaker opening logged %d times, want once:\n%s", n, out)
	}
	if n := countLines(out, breakerClosedMsg, map[string]string{"adapter": "x", "route": "t"}); n != 1 {
		t.Errorf("breaker closing logged %d times, want once:\n%s", n, out)
	}
}

// TestDownAdapterDelaysNoOtherAdapter: adapter x is unreachable (its breaker
// opens) while y's rows drain; x is named not ready by AdapterStates and
// drainer_adapter_ready, y stays ready, x's rows wait without consuming
// attempts.
func TestDownAdapterDelaysNoOtherAdapter(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	x := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		return dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Err: errors.New("dial tcp: connection refused")}
	})
	y := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		return dispatch.Result{Outcome: dispatch.Success, Status: 200}
	})
	rt := testRouting(t, map[string]dispatch.Adapter{"x": x, "y": y}, &Route{Tool: "tx", Adapter: "x"}, &Route{Tool: "ty", Adapter: "y"})
	rt.Policies = map[string]GatePolicy{"x": {BreakerFailures: 3, BreakerOpenFor: time.Hour}, "y": {BreakerFailures: 3, BreakerOpenFor: time.Hour}}
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg, "test")
	xKeys := enqueueN(t, pool, "run-x", "tx", 30)
	e := startEngine(t, pool, rt, Config{Workers: 4, Metrics: metrics})
	testkit.WaitFor(t, 30*time.Second, "x's breaker open", func() (bool, string) { return !stateOf(e, "x").Ready, "" })
	yKeys := enqueueN(t, pool, "run-y", "ty", 30)
	testkit.WaitFor(t, 30*time.Second, "y's rows drained", func() (bool, string) {
		for _, k := range yKeys {
			if getRow(t, pool, k).Status != outbox.StatusSucceeded {
				return false, ""
			}
		}
		return true, ""
	})
	if st := stateOf(e, "x"); st.Ready || (st.Reason != "circuit breaker open" && st.Reason != "circuit breaker half-open") {
		t.Fatalf("adapter x: %+v; want not ready, breaker open (or probing)", st)
	}
	if st := stateOf(e, "y"); !st.Ready {
		t.Fatalf("adapter y: %+v; want ready", st)
	}
	expo := `
# HELP drainer_adapter_ready 1 when the adapter can send, 0 while its circuit breaker is open (or half-open) or it is held after refusing the credentials on several routes; its rows wait, other adapters drain.
# TYPE drainer_adapter_ready gauge
drainer_adapter_ready{adapter="x"} 0
drainer_adapter_ready{adapter="y"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expo), "drainer_adapter_ready"); err != nil {
		t.Fatal(err)
	}
	for _, k := range xKeys {
		// A leased row holds the attempt counted at claim (a probe, or a
		// row about to be turned away) until it is given back.
		if r := getRow(t, pool, k); !(r.Status == outbox.StatusPending && r.Attempts == 0 || r.Status == outbox.StatusInFlight && r.Attempts <= 1) {
			t.Fatalf("row of the down adapter: %+v; want waiting with no attempt consumed", r)
		}
	}
}

// TestAuditRecordsOnlyAnswersToRequests: a rate-limited adapter turns rows
// away between their attempts (the provider answers 429, then 200). The
// audit chain of each row records the provider's answers, each once, in
// order; the entries of rows turned away record no answer and say they
// were deferred. Before, each entry copied the row's last answer, so a
// chain showed more 429s than the provider gave.
func TestAuditRecordsOnlyAnswersToRequests(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	var answers answerLog
	seen := sync.Map{}
	x := dispatch.AdapterFunc(func(_ context.Context, m *dispatch.Message) dispatch.Result {
		if _, again := seen.LoadOrStore(m.Key, true); !again {
			answers.add(m.Key, 429)
			return dispatch.Result{Outcome: dispatch.Retry, Status: 429, Err: errors.New("http 429")}
		}
		answers.add(m.Key, 200)
		return dispatch.Result{Outcome: dispatch.Success, Status: 200}
	})
	rt := testRouting(t, map[string]dispatch.Adapter{"x": x}, &Route{Tool: "t", Adapter: "x", MaxAttempts: 10})
	rt.Policies = map[string]GatePolicy{"x": {RatePerSecond: 5, Burst: 1}}
	keys := enqueueN(t, pool, "run", "t", 10)
	// Rows never wait for their token: every row the limiter holds back is
	// turned away.
	startEngine(t, pool, rt, Config{Workers: 8, GateWait: -1})
	testkit.WaitFor(t, 60*time.Second, "rows drained", func() (bool, string) { return countByStatus(t, pool)["succeeded"] == 10, "" })
	deferred := 0
	for _, k := range keys {
		checkAuditRecordsAnswers(t, pool, &answers, k)
		for _, e := range auditOf(t, pool, k) {
			if e.Status == nil && e.Reason != nil && strings.HasPrefix(*e.Reason, "deferred: adapter at its rate_limit") {
				deferred++
			}
		}
	}
	if deferred == 0 {
		t.Fatalf("no row was turned away by the rate limit; the test saw nothing to check (%d answers of 429)", answers.count(429))
	}
}
