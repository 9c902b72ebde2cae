package drainer

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// TestRefusedCompensationEndsAtMaxAttempts: a provider that answers every
// attempt of a compensation with a refusal (Result.Refused: a full
// JetStream stream, a recipient table whose trigger raises, a broker's
// error code) consumes the row's attempts, so the compensation ends
// compensation_failed at its route's max_attempts and the saga halts. With
// such refusals taken as never sent, the attempts were given back and the
// compensation was retried for ever, its saga never halting and nobody paged.
func TestRefusedCompensationEndsAtMaxAttempts(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	p := &recorder{fn: func(m *dispatch.Message) dispatch.Result {
		switch m.Tuple.ToolName {
		case "release_stock":
			return dispatch.Result{Outcome: dispatch.Retry, Refused: true, Reason: "js_unavailable",
				Err: errors.New("jetstream refused the message: maximum messages exceeded")}
		case "ship_order":
			return dispatch.Result{Outcome: dispatch.Terminal, Status: 422, Err: errors.New("http 422")}
		}
		return dispatch.Result{Outcome: dispatch.Success}
	}}
	k2 := enqueueStep(t, pool, "run", "s2", "reserve_stock")
	enqueueStep(t, pool, "run", "s3", "ship_order")
	if _, err := pool.Exec(t.Context(), `UPDATE drainer.outbox SET next_attempt_at = now() + interval '300 milliseconds' WHERE step_id = 's3'`); err != nil {
		t.Fatal(err)
	}
	routes := sagaRoutes()
	for _, r := range routes {
		r.Backoff = Backoff{Base: 10 * time.Millisecond, Cap: 50 * time.Millisecond}
	}
	rt := testRouting(t, map[string]dispatch.Adapter{"p": p}, routes...)
	startEngine(t, pool, rt, Config{Workers: 4, SagaInterval: 100 * time.Millisecond})
	testkit.WaitFor(t, 30*time.Second, "the refused compensation to end", func() (bool, string) {
		c := compensationRows(t, pool, "run")
		return slices.Contains(c, "release_stock/compensation_failed"), fmt.Sprint(c)
	})
	if n := p.count("release_stock"); n != 3 {
		t.Fatalf("the refused compensation was sent %d times, want its route's max_attempts 3", n)
	}
	testkit.WaitFor(t, 15*time.Second, "the saga to halt", func() (bool, string) {
		s := sagaState(t, pool, "run")
		return s == outbox.SagaHalted, string(s)
	})
	if getRow(t, pool, k2).Status != outbox.StatusSucceeded {
		t.Fatal("the forward row of a failed compensation stays succeeded")
	}
}
