package drainer

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/ops"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// TestResumeBeforeTheEngineStarts: rows a pause deferred (for about a
// minute) go out within seconds of a resume made while no engine ran (a
// replica restarted, a database handed over in a fleet, every replica
// down): the engine that starts reads the resume from the audit and wakes
// them. Before, they waited out the deferral (up to 90 s). A route's pause
// and an adapter's.
func TestResumeBeforeTheEngineStarts(t *testing.T) {
	t.Parallel()
	for _, target := range []string{ops.TargetRoute, ops.TargetAdapter} {
		t.Run(target, func(t *testing.T) {
			t.Parallel()
			pool := newPool(t)
			ctx := t.Context()
			st, err := store.New("drainer")
			if err != nil {
				t.Fatal(err)
			}
			oc := ops.New(pool, st)
			who := ops.Who{Actor: "test", Reason: "maintenance"}
			name := map[string]string{ops.TargetRoute: "t", ops.TargetAdapter: "pay"}[target]
			if _, err := oc.Pause(ctx, target, name, who); err != nil {
				t.Fatal(err)
			}
			var calls atomic.Int64
			rt := testRouting(t, map[string]dispatch.Adapter{"pay": dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
				calls.Add(1)
				return dispatch.Result{Outcome: dispatch.Success}
			})}, &Route{Tool: "t", Adapter: "pay"})
			keys := enqueueN(t, pool, "run", "t", 5)
			first := startEngine(t, pool, rt, Config{Workers: 2})
			testkit.WaitFor(t, 30*time.Second, "the paused rows deferred", func() (bool, string) {
				var states []string
				held := true
				for _, k := range keys {
					r := getRow(t, pool, k)
					states = append(states, fmt.Sprintf("%s/%d due in %s", r.Status, r.Attempts, r.DueIn.Round(time.Second)))
					held = held && r.Status == outbox.StatusPending && r.DueIn > 25*time.Second
				}
				return held, strings.Join(states, ", ")
			})
			stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := first.Stop(stopCtx); err != nil {
				t.Fatal(err)
			}
			if _, err := oc.Resume(ctx, target, name, who); err != nil {
				t.Fatal(err)
			}
			startEngine(t, pool, rt, Config{Workers: 2})
			// The rows were deferred for 25 s or more: sent well before
			// that, they were woken.
			testkit.WaitFor(t, 20*time.Second, "the rows sent after the resume", func() (bool, string) {
				c := countByStatus(t, pool)
				return c[outbox.StatusSucceeded] == len(keys), fmt.Sprint(c)
			})
			if n := calls.Load(); n != int64(len(keys)) {
				t.Fatalf("%d calls for %d rows", n, len(keys))
			}
		})
	}
}
