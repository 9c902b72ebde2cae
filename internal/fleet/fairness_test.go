package fleet

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
)

// TestFleetFairness: one database holds a large backlog (10,000 rows;
// DRAINER_FLEET_FAIRNESS_ROWS overrides, e.g. 1000000), drained by its
// engine; rows enqueued one at a time into another database of the
// same replica are each dispatched while that backlog is still there: a
// backlog holds its own database's engine only. The waits (commit to
// dispatch) are reported, not judged: they depend on the machine.
func TestFleetFairness(t *testing.T) {
	t.Parallel()
	backlog := 10_000
	if v, err := strconv.Atoi(os.Getenv("DRAINER_FLEET_FAIRNESS_ROWS")); err == nil && v > 0 {
		backlog = v
	}
	cl := newCluster(t, 100)
	cl.createDBs(t, []string{"big", "small"})
	began := time.Now()
	fill(t, cl, "big", backlog)
	t.Logf("%d rows enqueued into big in %s", backlog, time.Since(began).Round(time.Millisecond))

	c := newCounter()
	// big drains at most 8 workers / 5 ms = 1,600 rows/s, and halts half-way
	// until small's rows are all sent, so that its backlog is certainly
	// still there when they are, however slow the machine.
	var bigSent atomic.Int64
	smallDone := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(smallDone) }) }
	t.Cleanup(release) // a failed test does not leave big's calls blocked
	c.before = func(m *dispatch.Message) {
		if m.Tuple.AgentRunID != "run-backlog" {
			return
		}
		time.Sleep(5 * time.Millisecond)
		if bigSent.Add(1) >= int64(backlog/2) {
			<-smallDone
		}
	}
	r := startReplica(t, cl.url("big"), static(cl, []string{"big", "small"}), routing(t, c), "solo", nil)
	testkit.WaitFor(t, 3*time.Minute, "both databases drained here", func() (bool, string) {
		return slices.Equal(r.Draining(), []string{"big", "small"}), ""
	})
	testkit.WaitFor(t, 3*time.Minute, "big's drain under way", func() (bool, string) { _, _, total := c.distinct(); return total > 0, "" })

	var waits []time.Duration
	var keys []string
	for i := range 20 {
		k := cl.enqueue(t, "small", strconv.Itoa(i), 1)
		committed := time.Now()
		testkit.WaitFor(t, 3*time.Minute, fmt.Sprintf("small's row %d dispatched", i), func() (bool, string) {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.n[k[0]] > 0, ""
		})
		waits = append(waits, time.Since(committed))
		keys = append(keys, k...)
	}
	pending := cl.statuses(t, "big")["pending"]
	release()
	if pending == 0 {
		t.Fatalf("big's backlog was drained before small's rows were all sent")
	}
	slices.Sort(waits)
	_, _, total := c.distinct()
	t.Logf("small's 20 rows sent while big still had %d of %d rows pending (%d sent): wait from commit to dispatch median %s, worst %s",
		pending, backlog, total, waits[len(waits)/2].Round(time.Millisecond), waits[len(waits)-1].Round(time.Millisecond))
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range keys {
		if c.n[k] != 1 {
			t.Errorf("small's row %s dispatched %d times", k, c.n[k])
		}
	}
}

// fill enqueues n rows of tool "t" into db, inside the server, 10,000 to a
// statement.
func fill(t testing.TB, cl *cluster, db string, n int) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), cl.url(db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	const chunk = 10_000
	for from := 0; from < n; from += chunk {
		m := min(chunk, n-from)
		_, err := conn.Exec(t.Context(), `SELECT count(*) FROM drainer.enqueue_batch(
			array_fill('run-backlog'::text, ARRAY[$1::int]),
			ARRAY(SELECT 'step-' || g FROM generate_series($2::int, $2::int + $1::int - 1) g),
			array_fill('t'::text, ARRAY[$1::int]), array_fill(''::text, ARRAY[$1::int]),
			array_fill('{}'::jsonb, ARRAY[$1::int]))`, m, from)
		if err != nil {
			t.Fatalf("fill %s: %v", db, err)
		}
	}
}
