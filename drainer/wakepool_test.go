package drainer

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestListenPooled: an engine with ListenPooled holds no connection beyond
// its pool of two, yet with a poll of ten minutes it claims every row
// enqueued while it sleeps: the notification reaches the connection it
// borrowed to listen on. A burst makes it busy (it gives the connection
// back, so both serve the drain) and it listens again once idle. At no
// point does more than one of its sessions hold wake-gate locks (a
// connection given back to the pool never keeps its seat).
func TestListenPooled(t *testing.T) {
	base := newPool(t)
	pc, err := pgxpool.ParseConfig(base.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 2
	pc.ConnConfig.RuntimeParams["application_name"] = "drainer-listenpooled"
	pool, err := pgxpool.NewWithConfig(t.Context(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // after the engine's stop (cleanups run last first)

	var mu sync.Mutex
	seen := map[string]int{}
	a := dispatch.AdapterFunc(func(_ context.Context, m *dispatch.Message) dispatch.Result {
		mu.Lock()
		seen[m.Key]++
		mu.Unlock()
		return dispatch.Result{Outcome: dispatch.Success, Status: 200}
	})
	startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"p": a}, &Route{Tool: "t", Adapter: "p"}),
		Config{Workers: 64, ListenPooled: true, PollInterval: 10 * time.Minute})

	// The sampler watches the engine's sessions throughout.
	var maxConns, maxHolders atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			var conns, holders int64
			err := base.QueryRow(context.Background(), `
				SELECT count(*), count(*) FILTER (WHERE EXISTS (
				         SELECT 1 FROM pg_locks l, generate_series(0, 7) i, unnest(ARRAY['.wake.', '.wake_seat.']) lock
				          WHERE l.pid = a.pid AND l.locktype = 'advisory' AND l.objsubid = 1
				            AND ((l.classid::bigint << 32) | l.objid::bigint) = hashtextextended($1 || lock || i, 0)))
				  FROM pg_stat_activity a WHERE a.application_name = 'drainer-listenpooled'`, storetest.Schema).Scan(&conns, &holders)
			if err == nil {
				maxConns.Store(max(maxConns.Load(), conns))
				maxHolders.Store(max(maxHolders.Load(), holders))
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	dispatched := func(keys []string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, k := range keys {
				if seen[k] == 0 {
					return false
				}
			}
			return true
		}
	}
	var all []string
	// Idle: each row is enqueued once the one before was sent, so every
	// one finds the engine asleep; the poll (ten minutes) never runs.
	for i := range 10 {
		keys := enqueueN(t, base, fmt.Sprint("idle-", i), "t", 1)
		all = append(all, keys...)
		waitFor(t, fmt.Sprintf("idle row %d claimed on its notification", i), 60*time.Second, dispatched(keys))
	}
	// Busy: a burst, claimed in batches with the connection given back.
	burst := enqueueN(t, base, "burst", "t", 2000)
	all = append(all, burst...)
	waitFor(t, "the burst drained", 120*time.Second, dispatched(burst))
	// Idle again: it listens again.
	for i := range 5 {
		keys := enqueueN(t, base, fmt.Sprint("again-", i), "t", 1)
		all = append(all, keys...)
		waitFor(t, fmt.Sprintf("row %d after the burst claimed on its notification", i), 60*time.Second, dispatched(keys))
	}
	close(stop)
	<-sampled

	mu.Lock()
	for _, k := range all {
		if seen[k] != 1 {
			t.Errorf("row %s dispatched %d times", k, seen[k])
		}
	}
	mu.Unlock()
	if n := maxConns.Load(); n > 2 || n == 0 {
		t.Errorf("the engine held up to %d connections on a pool of 2", n)
	}
	if n := maxHolders.Load(); n != 1 {
		t.Errorf("up to %d of the engine's sessions held wake-gate locks at once, want 1", n)
	}
}
