package drainer

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// TestLogsCarryNoPayload: at debug level, through successes, retries,
// terminal failures and a panicking adapter, no log line contains a payload
// or the provider's answer.
func TestLogsCarryNoPayload(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	const marker = "s3cr3t-payload-marker"
	ctx := t.Context()
	for i, tool := range []string{"ok", "flaky", "bad", "boom"} {
		if _, err := pool.Exec(ctx, "SELECT drainer.enqueue($1, 's', $2, '', $3::jsonb)", "run-"+itoa(i), tool, `{"card":"`+marker+`"}`); err != nil {
			t.Fatal(err)
		}
	}
	var n sync.Map
	adapters := map[string]dispatch.Adapter{
		"ok": dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
			return dispatch.Result{Outcome: dispatch.Success, Response: []byte(`{"echo":"` + marker + `"}`)}
		}),
		"flaky": dispatch.AdapterFunc(func(_ context.Context, m *dispatch.Message) dispatch.Result {
			if v, _ := n.LoadOrStore(m.Key, 0); v.(int) < 1 {
				n.Store(m.Key, 1)
				return dispatch.Result{Outcome: dispatch.Retry, Status: 503, Err: errors.New("http 503")}
			}
			return dispatch.Result{Outcome: dispatch.Success}
		}),
		"bad": dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
			return dispatch.Result{Outcome: dispatch.Terminal, Status: 422, Err: errors.New("http 422")}
		}),
		"boom": dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result { panic("adapter bug") }),
	}
	var buf testkit.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	startEngine(t, pool, testRouting(t, adapters, &Route{Tool: "ok"}, &Route{Tool: "flaky"}, &Route{Tool: "bad"}, &Route{Tool: "boom", MaxAttempts: 1}),
		Config{Workers: 4, Logger: log})
	testkit.WaitFor(t, 10*time.Second, "rows settled", func() (bool, string) {
		c := countByStatus(t, pool)
		return c["succeeded"] == 2 && c["failed"] == 2, ""
	})
	out := buf.String()
	if !strings.Contains(out, "adapter panicked") || !strings.Contains(out, `"outcome":"terminal"`) {
		t.Fatalf("expected log lines missing:\n%s", out)
	}
	if strings.Contains(out, marker) {
		t.Fatalf("a log line carries the payload or the provider's answer:\n%s", out)
	}
}
