package drainer

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// TestCompletionsGoOnBesideALockHeldElsewhere: an agent aborts its run in
// a transaction it leaves open. A row of that run, in flight meanwhile,
// then ends failed, and its completion's trigger (which aborts the run
// too) waits for that transaction. The replica's other completions, and
// so its claims, go on: every row of another run settles while the
// transaction is still open (before, the replica's completer waited with
// it, for as long as it stayed open). Once it ends, the held row is
// written too, failed, its run aborted once.
func TestCompletionsGoOnBesideALockHeldElsewhere(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := context.Background()
	release := make(chan struct{})
	var inCall atomic.Int64
	ad := dispatch.AdapterFunc(func(_ context.Context, m *dispatch.Message) dispatch.Result {
		if m.Tuple.AgentRunID != "run-held" {
			return dispatch.Result{Outcome: dispatch.Success, Status: 200, Response: []byte(`{}`)}
		}
		inCall.Add(1)
		<-release
		return dispatch.Result{Outcome: dispatch.Terminal, Status: 422, Reason: dispatch.ReasonHTTP4xx}
	})
	held := enqueueN(t, pool, "run-held", "t", 2)
	startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"t": ad}, &Route{Tool: "t"}),
		Config{Workers: 8, Lease: 5 * time.Minute})
	testkit.WaitFor(t, time.Minute, "the held run's rows in their calls", func() (bool, string) {
		return inCall.Load() == 2, fmt.Sprint(inCall.Load())
	})

	agent, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Rollback(ctx)
	if _, err := agent.Exec(ctx, `SELECT drainer.abort_run('run-held', 'the agent gave up')`); err != nil {
		t.Fatal(err)
	}
	close(release) // the held rows end failed: their completions wait for the agent's transaction

	others := enqueueN(t, pool, "run-other", "t", 40)
	testkit.WaitFor(t, time.Minute, "every row of the other run settled while the agent's transaction is open", func() (bool, string) {
		n := 0
		for _, k := range others {
			if getRow(t, pool, k).Status == outbox.StatusSucceeded {
				n++
			}
		}
		return n == len(others), fmt.Sprintf("%d of %d", n, len(others))
	})
	for _, k := range held {
		if st := getRow(t, pool, k).Status; st != outbox.StatusInFlight {
			t.Fatalf("held row %s is %s while the agent's transaction is open, want in_flight", k, st)
		}
	}
	if err := agent.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, time.Minute, "the held rows written once the agent's transaction ended", func() (bool, string) {
		a, b := getRow(t, pool, held[0]).Status, getRow(t, pool, held[1]).Status
		return a == outbox.StatusFailed && b == outbox.StatusFailed, fmt.Sprint(a, b)
	})
}

// TestUnwrittenRetriedFromEverywhereAtOnce: the completions kept for a
// later write are tried again by the completer's loop, the reclaimer and
// Stop, at once, while more are kept: each is written once and forgotten,
// none twice, and nothing panics (two tries at once once trimmed the list
// twice: slice bounds out of range).
func TestUnwrittenRetriedFromEverywhereAtOnce(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ok := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		return dispatch.Result{Outcome: dispatch.Success, Status: 200}
	})
	e := startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"t": ok}, &Route{Tool: "t"}), Config{Workers: 2})
	c := e.completer
	keep := func(from int) {
		var batch []completion
		for i := range 500 {
			// rows that do not exist: written as lost, at once
			batch = append(batch, completion{Completion: store.Completion{Seq: -int64(from + i), Status: outbox.StatusSucceeded}})
		}
		c.noteUnwritten(batch)
	}
	keep(1)
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for i := range 5 {
				switch g % 3 {
				case 0:
					_ = c.retryUnwritten(t.Context(), 15*time.Second)
				case 1:
					_ = c.writeUnwritten(t.Context(), g%2 == 0)
				case 2:
					keep(1_000_000 * (g*10 + i + 1))
				}
			}
		})
	}
	wg.Wait()
	if err := c.writeUnwritten(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	c.unwrittenMu.Lock()
	defer c.unwrittenMu.Unlock()
	if len(c.unwritten) != 0 {
		t.Fatalf("%d completions still kept after every try wrote", len(c.unwritten))
	}
}
