package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestOverviewNeverDelaysHeartbeat: the console's overview (Backlogs) is
// what the heartbeat read back in the round trip of its publication, kept
// in memory. With fleet_databases locked by another session, the replica
// still beats at every heartbeat: each publication (and its read) waits on
// the lock, is cut at its bound (by the server's lock_timeout, the
// connection kept) and counted, and Backlogs answers at once with the last
// read, unchanged but for its ages. Once the lock is released, the next
// beat reads again.
func TestOverviewNeverDelaysHeartbeat(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 100)
	dbs := names("con_hb", 1)
	cl.createDBs(t, dbs)
	logs := &testkit.Buffer{}
	r := startReplica(t, cl.url(dbs[0]), static(cl, dbs), routing(t, newCounter()), "a", func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	testkit.WaitFor(t, 90*time.Second, "the backlog published and read", func() (bool, string) {
		bl, _, err := r.Backlogs()
		return err == nil && len(bl) == 1 && bl[0].SampledAt != nil, fmt.Sprint(bl, err)
	})

	admin, err := pgx.Connect(t.Context(), cl.url(dbs[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	locker, err := admin.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = locker.Rollback(context.Background()) }()
	table := pgx.Identifier{r.cfg.Schema, "fleet_databases"}.Sanitize()
	if _, err := locker.Exec(t.Context(), "LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	errs := func() float64 { return testutil.ToFloat64(r.m.coordErrors) }
	// The first publication cut by the lock: from then on nothing can
	// change the overview until the lock is released.
	cut := errs()
	testkit.WaitFor(t, 90*time.Second, "a publication cut by the lock", func() (bool, string) {
		return errs() > cut, fmt.Sprint(errs(), " heartbeat errors")
	})
	before, readAt, err := r.Backlogs()
	if err != nil || len(before) != 1 {
		t.Fatalf("the overview once the lock is taken: %v %v", before, err)
	}

	watch, err := pgx.Connect(t.Context(), cl.url(dbs[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(context.Background())
	beatAt := func() time.Time {
		var at time.Time
		if err := watch.QueryRow(t.Context(), "SELECT heartbeat_at FROM "+pgx.Identifier{r.cfg.Schema, "fleet_members"}.Sanitize()+
			" WHERE member_id = $1", r.ID()).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	// Three heartbeats while the table stays locked, each followed by a
	// publication cut (counted), and the overview answering at once with
	// the last read.
	last, cut := beatAt(), errs()
	for i := range 3 {
		testkit.WaitFor(t, 90*time.Second, fmt.Sprintf("heartbeat %d, and its publication cut, while the table is locked", i+1), func() (bool, string) {
			at := beatAt()
			return at.After(last) && errs() > cut, fmt.Sprintf("last heartbeat at %s, %v heartbeat errors", at, errs())
		})
		last, cut = beatAt(), errs()
		bl, at, err := r.Backlogs()
		if err != nil || !at.Equal(readAt) || len(bl) != 1 || bl[0].Name != before[0].Name || !bl[0].PublishedAt.Equal(before[0].PublishedAt) ||
			!maps.Equal(bl[0].RowsByStatus, before[0].RowsByStatus) || *bl[0].SampleAgeSeconds < *before[0].SampleAgeSeconds {
			t.Fatalf("the overview while the table is locked: %v read at %s (%v), want the last read %v read at %s", bl, at, err, before, readAt)
		}
	}
	var lockTimeouts int
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "publishing the databases' backlog failed") && strings.Contains(line, "55P03") {
			lockTimeouts++
		}
	}
	if lockTimeouts == 0 {
		t.Errorf("no publication cut by the server's lock_timeout (SQLSTATE 55P03):\n%s", logs)
	}

	if err := locker.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 90*time.Second, "the overview read again once the lock is released", func() (bool, string) {
		bl, at, err := r.Backlogs()
		return err == nil && at.After(readAt) && len(bl) == 1 && bl[0].PublishedAt.After(before[0].PublishedAt), fmt.Sprint(bl, at, err)
	})
}

// TestPoolReplacedWhileInUse: a database leaves the list while a console
// request holds its pool's connection. The fleet's loop goes on at once
// (the database is let go, other databases' pools are handed out), and
// the pool closes once the request releases its connection.
func TestPoolReplacedWhileInUse(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 100)
	dbs := names("con_pool", 2)
	cl.createDBs(t, dbs)
	var mu sync.Mutex
	listed := dbs
	src := func(ctx context.Context) ([]Database, error) {
		mu.Lock()
		defer mu.Unlock()
		return static(cl, listed)(ctx)
	}
	r := startReplica(t, cl.url(dbs[0]), src, routing(t, newCounter()), "a", nil)
	testkit.WaitFor(t, 90*time.Second, "both databases drained", func() (bool, string) {
		return slices.Equal(r.Draining(), dbs), fmt.Sprint(r.Draining())
	})
	pool, err := r.Pool(dbs[1])
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	released := false
	defer func() {
		if !released {
			conn.Release()
		}
	}()

	mu.Lock()
	listed = dbs[:1]
	mu.Unlock()
	testkit.WaitFor(t, 90*time.Second, "the unlisted database let go", func() (bool, string) {
		return slices.Equal(r.Draining(), dbs[:1]), fmt.Sprint(r.Draining())
	})
	// Another database's pool is handed out meanwhile: Pool is not waiting
	// on the pool being closed.
	other := make(chan error, 1)
	go func() {
		_, err := r.Pool(dbs[0])
		other <- err
	}()
	testkit.WaitFor(t, 90*time.Second, "another database's pool", func() (bool, string) {
		select {
		case err := <-other:
			if err != nil {
				t.Fatal(err)
			}
			return true, ""
		default:
			return false, "Pool has not returned"
		}
	})
	if _, err := r.Pool(dbs[1]); !errors.As(err, new(*UnknownDatabaseError)) {
		t.Errorf("Pool of the unlisted database: %v, want an UnknownDatabaseError", err)
	}
	// The request under way still has its connection.
	var one int
	if err := conn.QueryRow(t.Context(), "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("the request's connection: %d %v", one, err)
	}
	conn.Release()
	released = true
	testkit.WaitFor(t, 90*time.Second, "the replaced pool closed", func() (bool, string) {
		c, err := pool.Acquire(t.Context())
		if err == nil {
			c.Release()
			return false, "the pool still hands out connections"
		}
		return pool.Stat().TotalConns() == 0, fmt.Sprint(err, pool.Stat().TotalConns())
	})
}
