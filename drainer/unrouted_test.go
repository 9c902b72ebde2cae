package drainer

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
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
