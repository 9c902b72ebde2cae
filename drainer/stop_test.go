package drainer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestStopIsBoundedWhenTheDatabaseStalls: a database that stops answering
// at shutdown (here, the row's completion waits behind a lock another
// session holds) does not keep Stop past its deadline and
// stopWriteMargin: the completion it could not write is kept (Unwritten)
// and Stop says how many; the row stays in flight until its lease expires
// and is reclaimed (or the statement left waiting writes it).
// Before, the completer tried for a whole lease (here two minutes), 15 s
// a try, however short the grace.
func TestStopIsBoundedWhenTheDatabaseStalls(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	release := make(chan struct{})
	called := make(chan struct{}, 1)
	a := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		called <- struct{}{}
		<-release
		return dispatch.Result{Outcome: dispatch.Success}
	})
	keys := enqueueN(t, pool, "run", "t", 1)
	e := startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"t": a}, &Route{Tool: "t"}),
		Config{Workers: 2, Lease: 2 * time.Minute})
	<-called
	// The completion's UPDATE waits for this lock for as long as it is held.
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(t.Context(), `SELECT 1 FROM drainer.queue o JOIN drainer.intents i ON i.seq = o.seq WHERE i.key = $1 FOR UPDATE OF o`, keys[0]); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	stopped := stopWithGrace(e, time.Second)
	close(release) // the call ends; its completion cannot be written
	select {
	case err := <-stopped:
		if err == nil || !strings.Contains(err.Error(), "1 completions could not be written") {
			t.Fatalf("Stop returned %v, want it to say the completion could not be written", err)
		}
		t.Logf("Stop returned after %v", time.Since(began).Round(time.Millisecond))
	case <-time.After(time.Minute):
		t.Fatal("Stop did not return within a minute of its one-second deadline while the database stalled")
	}
	if got := e.Unwritten(); len(got) != 1 || got[0].Status != outbox.StatusSucceeded {
		t.Fatalf("unwritten completions: %+v", got)
	}
}

// TestStopIsBoundedWhileAClaimStalls: a claim the database does not answer
// (here, behind a lock on the queue another session holds) does not keep
// Stop past its deadline and stopWriteMargin: the claim is cut off when
// Stop's time for writes is over, as a completion is. Before, Stop waited
// for the claim's own timeout (claimTimeout, 30 s).
func TestStopIsBoundedWhileAClaimStalls(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	e := startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"t": dispatch.AdapterFunc(
		func(context.Context, *dispatch.Message) dispatch.Result {
			return dispatch.Result{Outcome: dispatch.Success}
		})}, &Route{Tool: "t"}),
		Config{Workers: 2, PollInterval: 100 * time.Millisecond})
	// The lock is taken table by table (the queue's generations), so it
	// can deadlock with a statement of the engine under way; the database
	// then aborts one of the two, and the test takes it again.
	var tx pgx.Tx
	for try := 1; ; try++ {
		var err error
		if tx, err = pool.Begin(t.Context()); err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec(t.Context(), `LOCK TABLE drainer.queue IN ACCESS EXCLUSIVE MODE`)
		if err == nil {
			break
		}
		_ = tx.Rollback(context.Background())
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "40P01" || try == 10 {
			t.Fatal(err)
		}
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	// The poll's next claim waits for the lock.
	testkit.WaitFor(t, time.Minute, "a claim waiting for the lock", func() (bool, string) {
		var n int
		err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query ILIKE '%skip locked%'`).Scan(&n)
		return err == nil && n > 0, fmt.Sprint(err)
	})
	began := time.Now()
	stopped := stopWithGrace(e, time.Second)
	bound := time.Second + stopWriteMargin
	select {
	case err := <-stopped:
		t.Logf("Stop returned after %v (%v)", time.Since(began).Round(time.Millisecond), err)
	case <-time.After(claimTimeout - 5*time.Second):
		t.Fatalf("Stop did not return within %v while a claim stalled; its bound is its deadline and stopWriteMargin, %v", claimTimeout-5*time.Second, bound)
	}
}

// stopWithGrace runs e.Stop with a context of grace, and gives its error.
func stopWithGrace(e *Engine, grace time.Duration) <-chan error {
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		stopped <- e.Stop(ctx)
	}()
	return stopped
}
