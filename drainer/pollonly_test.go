package drainer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5/pgxpool"
)

// sharedAdapter succeeds and counts its Close calls.
type sharedAdapter struct{ closed atomic.Int32 }

func (a *sharedAdapter) Dispatch(context.Context, *dispatch.Message) dispatch.Result {
	return dispatch.Result{Outcome: dispatch.Success, Status: 200}
}

func (a *sharedAdapter) Close(context.Context) error { a.closed.Add(1); return nil }

// TestPollOnlySharedAdapters: an engine with PollOnly holds no connection
// beyond its pool (no LISTEN, no wake gate) and still drains by its poll;
// with SharedAdapters, stopping it leaves the adapters open for their owner.
func TestPollOnlySharedAdapters(t *testing.T) {
	t.Parallel()
	base := newPool(t)
	pc, err := pgxpool.ParseConfig(base.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 2
	pc.ConnConfig.RuntimeParams["application_name"] = "drainer-pollonly"
	pool, err := pgxpool.NewWithConfig(t.Context(), pc)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	a := &sharedAdapter{}
	e := startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"p": a}, &Route{Tool: "t", Adapter: "p"}),
		Config{Workers: 4, PollOnly: true, SharedAdapters: true})
	keys := enqueueN(t, base, "run", "t", 40)
	maxConns := 0
	testkit.WaitFor(t, 30*time.Second, "every row succeeded", func() (bool, string) {
		var n int
		if err := base.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'drainer-pollonly'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		maxConns = max(maxConns, n)
		for _, k := range keys {
			if getRow(t, base, k).Status != outbox.StatusSucceeded {
				return false, ""
			}
		}
		return true, ""
	})
	if maxConns > 2 {
		t.Errorf("%d connections for a poll-only engine on a pool of 2", maxConns)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n := a.closed.Load(); n != 0 {
		t.Errorf("shared adapter closed %d times by the engine's stop", n)
	}
}

// TestSharedAdaptersRelease: with SharedAdapters, the engine never closes
// the adapters; it tells their owner through Routing.Release, once per
// routing: when a Reload replaced it (and nothing uses it), and when Stop
// is over for the routing in force.
func TestSharedAdaptersRelease(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	a := &sharedAdapter{}
	var firstReleased, secondReleased atomic.Int32
	first := testRouting(t, map[string]dispatch.Adapter{"p": a}, &Route{Tool: "t", Adapter: "p"})
	first.Release = func() { firstReleased.Add(1) }
	e := startEngine(t, pool, first, Config{Workers: 2, PollOnly: true, SharedAdapters: true})
	second := testRouting(t, map[string]dispatch.Adapter{"p": a}, &Route{Tool: "t", Adapter: "p"})
	second.Release = func() { secondReleased.Add(1) }
	e.Reload(second)
	testkit.WaitFor(t, 30*time.Second, "the replaced routing released", func() (bool, string) { return firstReleased.Load() == 1, "" })
	keys := enqueueN(t, pool, "rel", "t", 5)
	testkit.WaitFor(t, 30*time.Second, "every row succeeded", func() (bool, string) {
		for _, k := range keys {
			if getRow(t, pool, k).Status != outbox.StatusSucceeded {
				return false, ""
			}
		}
		return true, ""
	})
	if n := secondReleased.Load(); n != 0 {
		t.Errorf("the routing in force released %d times before Stop", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if f, s, c := firstReleased.Load(), secondReleased.Load(), a.closed.Load(); f != 1 || s != 1 || c != 0 {
		t.Errorf("released %d and %d times, adapter closed %d times; want 1, 1, 0", f, s, c)
	}
}
