package drainer

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/prometheus/client_golang/prometheus"
)

// TestUnroutedToolGetsADidYouMean: a row whose tool_name is a misspelling
// of a routed tool waits for a route, and both its last_error and the log
// line name the route it probably meant.
func TestUnroutedToolGetsADidYouMean(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	keys := enqueueN(t, pool, "run-typo", "chrage_card", 1)
	var logs testkit.Buffer
	ok := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		return dispatch.Result{Outcome: dispatch.Success}
	})
	startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"p": ok},
		&Route{Tool: "charge_card", Adapter: "p"}, &Route{Tool: "refund_card", Adapter: "p"}),
		Config{Workers: 1, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	const want = `no route for tool_name "chrage_card" in the loaded config (did you mean "charge_card"?)`
	testkit.WaitFor(t, 10*time.Second, "the row to say which route it probably meant", func() (bool, string) {
		r := getRow(t, pool, keys[0])
		return r.LastError != nil && strings.HasPrefix(*r.LastError, want), deref(r.LastError)
	})
	if !strings.Contains(logs.String(), `"tool":"chrage_card","did_you_mean":"charge_card"`) {
		t.Errorf("the unrouted log line names no route it probably meant:\n%s", logs.String())
	}
}

// TestInventedToolsDeferredTogether: producers that invent a tool name per
// row (3,000 names, a row each) do not stall the routed rows queued behind
// them. The rows without a route are one class, deferred together by one
// sweep: the claims look at a batch or two of them, not at each. Before,
// each name was deferred by itself (a statement per name, the claims
// excluding a growing list of names meanwhile), so every invented row was
// claimed and given back one by one, at each recheck, ahead of the routed
// rows.
func TestInventedToolsDeferredTogether(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	const invented = 3000
	if _, err := pool.Exec(t.Context(), `SELECT count(*) FROM (SELECT drainer.enqueue('run-invented', 's' || g, 'inventedRows' || g, '', '{}')
	                                        FROM generate_series(1, $1) g) x`, invented); err != nil {
		t.Fatal(err)
	}
	keys := enqueueN(t, pool, "run-routed", "charge_card", 200)
	ok := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		return dispatch.Result{Outcome: dispatch.Success}
	})
	rt := testRouting(t, map[string]dispatch.Adapter{"p": ok}, &Route{Tool: "charge_card", Adapter: "p"})
	rt.UnroutedRecheck = time.Minute // no recheck within the test
	startEngine(t, pool, rt, Config{Workers: 8})
	testkit.WaitFor(t, 60*time.Second, "the routed rows to succeed", func() (bool, string) {
		n := 0
		for _, k := range keys {
			if getRow(t, pool, k).Status == outbox.StatusSucceeded {
				n++
			}
		}
		return n == len(keys), fmt.Sprintf("%d of %d", n, len(keys))
	})
	inventedRows := func() (looked, due int) {
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE last_error IS NOT NULL),
		                                             count(*) FILTER (WHERE next_attempt_at <= now())
		                                        FROM drainer.outbox WHERE agent_run_id = 'run-invented'`).Scan(&looked, &due); err != nil {
			t.Fatal(err)
		}
		return looked, due
	}
	// A claim takes at most a worker's worth of rows (8); a few claims may
	// be under way when the first refusal is reported.
	if looked, _ := inventedRows(); looked > 64 {
		t.Errorf("%d of the %d rows without a route were claimed and given back one by one before the routed rows drained; want a few claims' worth (<= 64)", looked, invented)
	}
	// The sweep runs beside the claims (the deferrer's goroutine): the
	// routed rows may drain before it is written, on a fast machine. Once
	// written, no row is due, and the claims looked at no more of them.
	testkit.WaitFor(t, 30*time.Second, "the sweep to defer the rows without a route", func() (bool, string) {
		looked, due := inventedRows()
		return due == 0, fmt.Sprintf("%d still due, %d looked at", due, looked)
	})
	if looked, _ := inventedRows(); looked > 64 {
		t.Errorf("%d of the %d rows without a route were claimed and given back one by one; want a few claims' worth (<= 64)", looked, invented)
	}
}

// TestUnroutedLogNamesFewToolsAMinute: 500 invented tool names within a
// minute make unroutedLines lines naming a tool, and the next minute's first
// note one line counting the others; not a line per name.
func TestUnroutedLogNamesFewToolsAMinute(t *testing.T) {
	t.Parallel()
	var logs testkit.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	var u unroutedLog
	for i := range 500 {
		u.note(log, "inventedRows"+itoa(i), nil)
	}
	if n := strings.Count(logs.String(), "\n"); n != unroutedLines {
		t.Fatalf("%d log lines for 500 tool names within a minute, want %d:\n%s", n, unroutedLines, logs.String())
	}
	u.window = u.window.Add(-time.Minute) // the minute is over
	u.note(log, "inventedRowsnext", nil)
	if !strings.Contains(logs.String(), `"tools":490`) {
		t.Fatalf("no line counting the 490 tools not named:\n%s", logs.String())
	}
}

// TestUnroutedClaimConsumesNothing: a claim counts the attempt only of the
// rows whose tool the claimer has a route for. A row without one is never
// sent under its claim, so when its replica dies before handing it back
// (the lease expires, the reclaim takes it back) the row is pending with
// no attempt consumed and no first attempt: a route loaded much later must
// not find its attempts spent or its key's window started. Its payload,
// which only a dispatch would use, is not read. A routed row claimed
// beside it still has its attempt counted and its payload read.
func TestUnroutedClaimConsumesNothing(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ok := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		return dispatch.Result{Outcome: dispatch.Success}
	})
	rt := testRouting(t, map[string]dispatch.Adapter{"t": ok}, &Route{Tool: "t"})
	e, err := New(pool, rt, Config{Workers: 2, Metrics: NewMetrics(prometheus.NewRegistry(), "test")})
	if err != nil {
		t.Fatal(err)
	}
	lost := enqueueN(t, pool, "run-lost", "no_such_tool", 1)[0]
	routed := enqueueN(t, pool, "run-routed", "t", 1)[0]
	use := e.useRouting()
	rows, err := e.st.Claim(t.Context(), pool, store.Claim{Limit: 2, Lease: time.Millisecond, Replica: "dies",
		Routed: use.routedTools})
	use.done()
	if err != nil || len(rows) != 2 {
		t.Fatalf("claim: %d rows, %v", len(rows), err)
	}
	for _, r := range rows {
		if want := r.ToolName == "t"; r.Counted != want || r.Attempts != map[bool]int{true: 1, false: 0}[want] || (r.Payload != nil) != want {
			t.Errorf("claimed %s: counted %v, attempts %d, payload of %d bytes; want counted %v, and its payload read only then",
				r.ToolName, r.Counted, r.Attempts, len(r.Payload), want)
		}
	}
	// The replica dies: nothing hands the rows back; the lease expires.
	time.Sleep(10 * time.Millisecond)
	if n, err := e.st.Reclaim(t.Context(), pool, store.ReclaimPolicy{}); err != nil || n != 2 {
		t.Fatalf("reclaim: %d rows, %v; want 2", n, err)
	}
	for key, want := range map[string]int{lost: 0, routed: 1} {
		var status string
		var attempts int
		var first *time.Time
		if err := pool.QueryRow(t.Context(), `SELECT status, attempts, first_attempt_at FROM drainer.queue q
			JOIN drainer.intents i USING (seq) WHERE i.key = $1`, key).Scan(&status, &attempts, &first); err != nil {
			t.Fatal(err)
		}
		if status != "pending" || attempts != want || (first == nil) != (want == 0) {
			t.Errorf("%s after its claimer died: %s, attempts %d, first attempt %v; want pending, attempts %d, a first attempt %v",
				key, status, attempts, first, want, want > 0)
		}
	}
}

// TestRouteLoadedAfterUncountedClaim: a row claimed while its tool had no
// route (its attempt not counted) whose route is loaded before the claim's
// preflight is not sent under that claim: it is handed back, nothing given
// back, due at once, and its next claim counts the attempt.
func TestRouteLoadedAfterUncountedClaim(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ok := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		return dispatch.Result{Outcome: dispatch.Success}
	})
	e, err := New(pool, testRouting(t, map[string]dispatch.Adapter{"t": ok}), Config{Workers: 2, Metrics: NewMetrics(prometheus.NewRegistry(), "test")})
	if err != nil {
		t.Fatal(err)
	}
	key := enqueueN(t, pool, "run-late", "t", 1)[0]
	gone := e.useRouting()
	rows, err := e.st.Claim(t.Context(), pool, store.Claim{Limit: 1, Lease: time.Minute, Replica: "test", Routed: gone.routedTools})
	gone.done()
	if err != nil || len(rows) != 1 || rows[0].Counted {
		t.Fatalf("claim: %+v, %v; want one row, not counted", rows, err)
	}
	e.Reload(testRouting(t, map[string]dispatch.Adapter{"t": ok}, &Route{Tool: "t"}))
	rt := e.useRouting()
	defer rt.done()
	route, _, c := e.preflight(&rows[0], rt)
	if route != nil || c == nil || c.Status != outbox.StatusPending || !c.KeepNext {
		t.Fatalf("preflight of an uncounted row now routed: route %v, completion %+v; want it handed back, due at once", route, c)
	}
	e.completer.flush([]completion{*c})
	rows, err = e.st.Claim(t.Context(), pool, store.Claim{Limit: 1, Lease: time.Minute, Replica: "test", Routed: rt.routedTools})
	if err != nil || len(rows) != 1 || rows[0].Key != key || !rows[0].Counted || rows[0].Attempts != 1 {
		t.Fatalf("the next claim: %+v, %v; want the row, counted, attempt 1", rows, err)
	}
}
