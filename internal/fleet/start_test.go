package fleet

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestFleetSlowStarts: eight databases answer, but so slowly that no engine
// can start there (their schema_meta is locked by another session), beside
// one database that answers at once. The replica starts engines a few at a
// time (startConcurrency), so that a host given many databases is not
// swamped: sampled throughout, it never has more start attempts under way
// than that. A start that times out after connecting is counted as
// start_timeout and the database stays starting: it is slow, not
// unreachable. Dropped from the list while some of them wait for a start
// slot, the slow databases leave the replica's budget whole (one pool
// held, its share one). Listed again and the lock released, every database
// drains, each row sent once.
func TestFleetSlowStarts(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 100)
	slow := names("slow", 8)
	cl.createDBs(t, append(slices.Clone(slow), "quick"))
	var keys []string
	for _, db := range append(slices.Clone(slow), "quick") {
		keys = append(keys, cl.enqueue(t, db, "1", 5)...)
	}
	// Another session holds each slow database's schema_meta: the engine's
	// schema check waits on it.
	var lockers []pgx.Tx
	for _, db := range slow {
		conn, err := pgx.Connect(t.Context(), cl.url(db))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		tx, err := conn.Begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(t.Context(), "LOCK TABLE drainer.schema_meta IN ACCESS EXCLUSIVE MODE"); err != nil {
			t.Fatal(err)
		}
		lockers = append(lockers, tx)
	}
	// The replica's connections (application_name drainer) to the slow
	// databases: one per start attempt under way.
	watch, err := pgx.Connect(t.Context(), cl.url("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(context.Background())
	attempts := func() int {
		var n int
		if err := watch.QueryRow(t.Context(), "SELECT count(*) FROM pg_stat_activity WHERE datname = ANY($1) AND application_name = 'drainer'", slow).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	c := newCounter()
	all := append(slices.Clone(slow), "quick")
	var mu sync.Mutex
	listed := all
	src := func(ctx context.Context) ([]Database, error) {
		mu.Lock()
		defer mu.Unlock()
		return static(cl, listed)(ctx)
	}
	relist := func(names []string) {
		mu.Lock()
		listed = names
		mu.Unlock()
	}
	r := startReplica(t, cl.url("quick"), src, routing(t, c), "solo", func(cfg *Config) {
		cfg.StartTimeout = 5 * time.Second
	})
	// Once the slots are full (the other slow databases waiting for one),
	// the slow databases are dropped from the list: whatever each was
	// doing, its budget comes back. Then they are listed again.
	testkit.WaitFor(t, 3*time.Minute, "the start slots full", func() (bool, string) {
		n := attempts()
		return n == startConcurrency, fmt.Sprint(n, " start attempts under way")
	})
	relist([]string{"quick"})
	testkit.WaitFor(t, 3*time.Minute, "the slow databases let go", func() (bool, string) {
		return r.Unsettled() == 0 && slices.Equal(r.Draining(), []string{"quick"}), fmt.Sprint(r.Draining(), r.Unsettled())
	})
	if held, share := r.budget.counts(); held != 1 || share != 1 {
		t.Errorf("once the slow databases were let go the replica holds %d pools for a share of %d, want 1 and 1", held, share)
	}
	relist(all)
	most := 0
	// Every slow database's start timed out at least once, or one was
	// counted unreachable (which fails below).
	timedOut := func() bool {
		for _, db := range slow {
			if testutil.ToFloat64(r.m.dbErrors.WithLabelValues(db, reasonUnreachable)) > 0 {
				return true
			}
		}
		for _, db := range slow {
			if testutil.ToFloat64(r.m.dbErrors.WithLabelValues(db, reasonStartTimeout)) == 0 {
				return false
			}
		}
		return true
	}
	testkit.WaitFor(t, 3*time.Minute, "every slow database's start timed out at least once", func() (bool, string) {
		most = max(most, attempts())
		return timedOut(), fmt.Sprintf("%d start attempts under way", most)
	})
	for _, db := range slow {
		if n := testutil.ToFloat64(r.m.dbErrors.WithLabelValues(db, reasonUnreachable)); n != 0 {
			t.Errorf("%s, slow to start, counted unreachable %v times", db, n)
		}
	}
	if n := testutil.ToFloat64(r.m.databases.WithLabelValues(stateUnreachable)); n != 0 {
		t.Errorf("%v databases unreachable, want 0: they answer, slowly", n)
	}
	t.Logf("at most %d start attempts under way at once (bound %d)", most, startConcurrency)
	if most > startConcurrency {
		t.Errorf("%d start attempts under way at once, bound %d", most, startConcurrency)
	}

	for _, tx := range lockers {
		if err := tx.Rollback(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, 3*time.Minute, "every row sent once the locks are released", func() (bool, string) {
		return c.idle(keys), state(c, r)
	})
	c.check(t, keys)
}
