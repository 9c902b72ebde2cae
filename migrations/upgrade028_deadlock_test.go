package migrations

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestUpgradeTo028BesideAWriterDoesNotDeadlock: upgrading a release-27
// schema while a producer's transaction has read the audit (as every
// enqueue does, for its chain's head) and then appends to it makes the
// producer wait for the upgrade, never fail. The migration held its SHARE
// lock on the audit and then asked for ACCESS EXCLUSIVE to drop the old
// index: the producer, holding ACCESS SHARE and queued for ROW EXCLUSIVE,
// closed a cycle, and one side got 40P01 (seen live: enqueues and aborts
// of every producer session failed).
func TestUpgradeTo028BesideAWriterDoesNotDeadlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := openOldSchema(t, 27, "release 27", "")
	code, _, err := Code("drainer")
	if err != nil {
		t.Fatal(err)
	}
	o.exec("BEGIN;\n" + code + "\nCOMMIT;")
	o.exec(`SELECT drainer.enqueue('r1', 'a', 'charge', '', '{"amount": 1}')`)
	connect := func() *pgx.Conn {
		t.Helper()
		c, err := pgx.ConnectConfig(ctx, o.conn.Config().Copy())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
	writer, migrator := connect(), connect()
	tx, err := writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT count(*) FROM drainer.audit`); err != nil {
		t.Fatal(err)
	}

	// A lock wait longer than deadlock_timeout (1 s): the deadlock, if
	// there is one, is found before the step gives up and retries.
	done := make(chan migrateResult, 1)
	go func() {
		n, err := MigrateWith(ctx, migrator, "drainer", Options{LockTimeout: 3 * time.Second, LockWait: time.Minute})
		done <- migrateResult{n, err}
	}()
	probe := connect()
	waitFor(t, "the upgrade to wait for a lock the producer holds", func() bool {
		var waiting bool
		err := probe.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks WHERE pid = $1 AND NOT granted)`, migrator.PgConn().PID()).Scan(&waiting)
		return err != nil || waiting || len(done) > 0
	})
	if _, err := tx.Exec(ctx, `SELECT drainer.audit_append('route:charge', 'operator:pause', NULL)`); err != nil {
		t.Fatalf("the producer's append while the upgrade waits: %v (want it to wait for the upgrade)", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("the upgrade beside the producer: %v", r.err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the upgrade did not end within 2 minutes of the producer's commit")
	}
	if v, err := Check(ctx, o.conn, "drainer"); err != nil || v != Latest() {
		t.Fatalf("after the upgrade: version %d, %v; want %d", v, err, Latest())
	}
}
