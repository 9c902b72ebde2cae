package drainer

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// TestWakeGateNoRowWaitsForThePoll: in each round a burst of producers,
// started a few milliseconds apart, enqueue in transactions that stay open
// a random while after their insert, so that some insert while a replica is
// busy (and skip the notification) and commit while it is deciding to sleep; then nothing
// more is enqueued until the round's rows are dispatched. The replicas' poll
// is an hour: a row whose producer skipped its notification while the
// replicas went to sleep would stay pending, and the round would time out.
func TestWakeGateNoRowWaitsForThePoll(t *testing.T) {
	t.Parallel()
	for _, replicas := range []int{1, 2} {
		t.Run(itoa(replicas)+"_replicas", func(t *testing.T) { wakeGateRounds(t, replicas) })
	}
}

func wakeGateRounds(t *testing.T, replicas int) {
	pool := newPool(t)
	ok := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		return dispatch.Result{Outcome: dispatch.Success}
	})
	for range replicas {
		startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"t": ok}, &Route{Tool: "t"}),
			Config{Workers: 4, PollInterval: time.Hour})
	}
	const rounds, producers = 60, 4
	rng := rand.New(rand.NewPCG(uint64(replicas), 2))
	for round := range rounds {
		starts, holds := make([]time.Duration, producers), make([]time.Duration, producers)
		for p := range holds {
			starts[p] = time.Duration(rng.IntN(30)) * time.Millisecond
			holds[p] = time.Duration(rng.IntN(25)) * time.Millisecond
		}
		var wg sync.WaitGroup
		for p := range producers {
			wg.Go(func() {
				ctx := context.Background()
				time.Sleep(starts[p]) // staggered: some insert while a replica is busy or arming
				tx, err := pool.Begin(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				defer tx.Rollback(ctx)
				if _, err := tx.Exec(ctx, `SELECT * FROM drainer.enqueue($1, $2, 't', '', '{}')`,
					"run-"+itoa(round), "step-"+itoa(p)); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(holds[p]) // open after the insert
				if err := tx.Commit(ctx); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		testkit.WaitFor(t, 20*time.Second, "round "+itoa(round)+"'s rows dispatched without the poll", func() (bool, string) {
			return countByStatus(t, pool)["succeeded"] == (round+1)*producers, ""
		})
	}
}
