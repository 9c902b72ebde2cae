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
	"github.com/drainer-io/drainer/tooling/testkit"
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
	if _, err := pool.Exec(t.Context(), `SELECT count(*) FROM (SELECT drainer.enqueue('run-invented', 's' || g, 'invented_' || g, '', '{}')
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
	var looked, due int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE last_error IS NOT NULL),
	                                             count(*) FILTER (WHERE next_attempt_at <= now())
	                                        FROM drainer.outbox WHERE agent_run_id = 'run-invented'`).Scan(&looked, &due); err != nil {
		t.Fatal(err)
	}
	// A claim takes at most a worker's worth of rows (8); a few claims may
	// be under way when the first refusal is reported.
	if looked > 64 {
		t.Errorf("%d of the %d rows without a route were claimed and given back one by one before the routed rows drained; want a few claims' worth (<= 64)", looked, invented)
	}
	if due > 0 {
		t.Errorf("%d rows without a route are still due: the sweep left them for the claims", due)
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
		u.note(log, "invented_"+itoa(i), nil)
	}
	if n := strings.Count(logs.String(), "\n"); n != unroutedLines {
		t.Fatalf("%d log lines for 500 tool names within a minute, want %d:\n%s", n, unroutedLines, logs.String())
	}
	u.window = u.window.Add(-time.Minute) // the minute is over
	u.note(log, "invented_next", nil)
	if !strings.Contains(logs.String(), `"tools":490`) {
		t.Fatalf("no line counting the 490 tools not named:\n%s", logs.String())
	}
}
