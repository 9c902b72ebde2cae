package drainer

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// TestSaturatedCapDoesNotSpin: 50 rows of a route whose provider takes a
// second per call, behind a cap of one call where a row the cap turns away
// cannot wait in its worker for the slot, and 20 rows of another adapter's
// route: the other route drains meanwhile, and the slow route's rows are
// claimed and turned away a bounded number of times per row delivered,
// however fast the machine. The cap is the implicit one of two workers
// shared by three adapters (each adapter without max_concurrency may hold
// one worker, and no row may wait: attachGates), or a max_concurrency of 1
// with rows that never wait (GateWait -1). Before, a row turned away freed
// its worker, whose finish woke the claim loop at once: it claimed the
// next due row of the same route, which the cap turned away again, about
// a hundred times a second (a claim, a release and an audit entry each;
// in a tester's run 58 deliveries cost 18,830 audit entries).
func TestSaturatedCapDoesNotSpin(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		workers int
		policy  GatePolicy
		wait    time.Duration
	}{
		{"implicit cap", 2, GatePolicy{}, 0},
		{"max_concurrency, no wait", 4, GatePolicy{MaxConcurrency: 1}, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			checkCapDoesNotSpin(t, c.workers, c.policy, c.wait)
		})
	}
}

func checkCapDoesNotSpin(t *testing.T, workers int, policy GatePolicy, gateWait time.Duration) {
	pool := newPool(t)
	var delivered, fastDone atomic.Int64
	slow := dispatch.AdapterFunc(func(ctx context.Context, _ *dispatch.Message) dispatch.Result {
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return dispatch.Result{Outcome: dispatch.Ambiguous, Reason: "timeout", Err: ctx.Err()}
		}
		delivered.Add(1)
		return dispatch.Result{Outcome: dispatch.Success}
	})
	fast := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		fastDone.Add(1)
		return dispatch.Result{Outcome: dispatch.Success}
	})
	idle := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		return dispatch.Result{Outcome: dispatch.Success}
	})
	keys := enqueueN(t, pool, "slow-run", "pay", 50)
	enqueueN(t, pool, "fast-run", "page", 20)
	rt := testRouting(t, map[string]dispatch.Adapter{"payments": slow, "pager": fast, "down": idle},
		&Route{Tool: "pay", Adapter: "payments"}, &Route{Tool: "page", Adapter: "pager"})
	rt.Policies = map[string]GatePolicy{"payments": policy}
	entry, _ := rt.Registry.Get("payments")
	entry.Timeout = 5 * time.Second
	var claims atomic.Int64
	e := startWithHooks(t, pool, rt, Config{Workers: workers, Lease: 20 * time.Second, GateWait: gateWait},
		wakeHooks{claiming: func(claimCause) { claims.Add(1) }})
	testkit.WaitFor(t, wakeTestWait, "the other adapter's rows drained and 4 slow rows delivered", func() (bool, string) {
		return fastDone.Load() == 20 && delivered.Load() >= 4, fmt.Sprintf("%d of 20 fast rows, %d slow", fastDone.Load(), delivered.Load())
	})
	n := delivered.Load()
	statements := claims.Load()
	var turned, entries int64
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE reason = $2), count(*) FROM drainer.audit WHERE key = ANY($1)`,
		keys, fmt.Sprintf(noteRefusedFmt, refusalNote[outbox.RefusedSaturated])).Scan(&turned, &entries); err != nil {
		t.Fatal(err)
	}
	var rows uint64
	for _, c := range e.ClaimedRows() {
		rows += c
	}
	t.Logf("%d slow rows delivered: %d turned away, %d audit entries of theirs, %d claims, %d rows claimed (20 fast rows among them)",
		n, turned, entries, statements, rows)
	// Each delivery frees one slot of the cap: at most the free workers'
	// rows are claimed for it (and all turned away but one), plus the
	// first claim's.
	w := int64(workers)
	if limit := w * (n + 1); turned > limit {
		t.Errorf("%d slow rows turned away at the cap for %d delivered: want at most %d (a claim/release spin)", turned, n, limit)
	}
	if limit := uint64((w + 2) * (n + 20)); rows > limit {
		t.Errorf("%d rows claimed for %d slow and 20 fast rows delivered: want at most %d (a claim/release spin)", rows, n, limit)
	}
	if limit := (w + 4) * (n + 20); statements > limit {
		t.Errorf("%d claims for %d slow and 20 fast rows delivered: want at most %d (a claim/release spin)", statements, n, limit)
	}
	if attempts := maxAttempts(t, pool); attempts > 1 {
		t.Fatalf("max attempts %d: rows turned away at the cap must not consume attempts", attempts)
	}
}
