package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestBacklogsReadDoesNotDelayHeartbeat: a console read stuck in the
// coordination database (here behind a lock on fleet_databases) holds its
// connection, yet the replica keeps beating: the read is not on the
// heartbeat's connection.
func TestBacklogsReadDoesNotDelayHeartbeat(t *testing.T) {
	cl := newCluster(t, 100)
	dbs := names("con_hb", 1)
	cl.createDBs(t, dbs)
	r := startReplica(t, cl.url(dbs[0]), static(cl, dbs), routing(t, newCounter()), "a", nil)
	waitForState(t, "the backlog published", 30*time.Second, func() (bool, string) {
		bl, err := r.Backlogs(t.Context())
		return err == nil && len(bl) == 1, fmt.Sprint(bl, err)
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
	type read struct {
		bl  []Backlog
		err error
	}
	done := make(chan read, 1)
	go func() {
		bl, err := r.Backlogs(context.Background())
		done <- read{bl, err}
	}()

	watch, err := pgx.Connect(t.Context(), cl.url(dbs[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(context.Background())
	waitForState(t, "the console read waiting on the lock", 30*time.Second, func() (bool, string) {
		var n int
		err := watch.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
 WHERE wait_event_type = 'Lock' AND query LIKE 'SELECT d.name, d.member_id%'`).Scan(&n)
		return err == nil && n == 1, fmt.Sprint(n, err)
	})
	beatAt := func() time.Time {
		var at time.Time
		if err := watch.QueryRow(t.Context(), "SELECT heartbeat_at FROM "+pgx.Identifier{r.cfg.Schema, "fleet_members"}.Sanitize()+
			" WHERE member_id = $1", r.ID()).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	// Two heartbeats after the read was seen waiting, while it still waits.
	last := beatAt()
	for i := range 2 {
		waitForState(t, fmt.Sprintf("heartbeat %d while the console read waits", i+1), 30*time.Second, func() (bool, string) {
			at := beatAt()
			if at.After(last) {
				last = at
				return true, ""
			}
			return false, "last heartbeat at " + at.String()
		})
	}
	select {
	case got := <-done:
		t.Fatalf("the console read returned while the table was locked: %v %v", got.bl, got.err)
	default:
	}

	if err := locker.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got.err != nil || len(got.bl) != 1 || got.bl[0].Name != dbs[0] {
		t.Fatalf("the console read, once the lock was released: %v %v", got.bl, got.err)
	}
}

// TestPoolReplacedWhileInUse: a database leaves the list while a console
// request holds its pool's connection. The fleet's loop goes on at once
// (the database is let go, other databases' pools are handed out), and
// the pool closes once the request releases its connection.
func TestPoolReplacedWhileInUse(t *testing.T) {
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
	waitForState(t, "both databases drained", 30*time.Second, func() (bool, string) {
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
	waitForState(t, "the unlisted database let go", 30*time.Second, func() (bool, string) {
		return slices.Equal(r.Draining(), dbs[:1]), fmt.Sprint(r.Draining())
	})
	// Another database's pool is handed out meanwhile: Pool is not waiting
	// on the pool being closed.
	other := make(chan error, 1)
	go func() {
		_, err := r.Pool(dbs[0])
		other <- err
	}()
	waitForState(t, "another database's pool", 30*time.Second, func() (bool, string) {
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
	waitForState(t, "the replaced pool closed", 30*time.Second, func() (bool, string) {
		c, err := pool.Acquire(t.Context())
		if err == nil {
			c.Release()
			return false, "the pool still hands out connections"
		}
		return pool.Stat().TotalConns() == 0, fmt.Sprint(err, pool.Stat().TotalConns())
	})
}
