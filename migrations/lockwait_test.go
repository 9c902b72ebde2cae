package migrations

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"
)

// logBuffer is a testkit.Buffer with the readings this package's tests make.
type logBuffer struct{ testkit.Buffer }

// hang bounds every wait of these tests that only a broken migrate makes
// long: a generous bound for "it did not block for good", never a timing.
const hang = 2 * time.Minute

// heldQueue is a schema at version 25 with release 24's code package (code
// revision 16), one row due, and a producer whose enqueue of another row
// is not committed yet: its transaction holds the queue's ROW EXCLUSIVE
// lock, which migration 026 (ALTER TABLE queue) must wait for.
type heldQueue struct {
	old      *oldSchema
	url      string
	producer *pgx.Conn
}

func openHeldQueue(t *testing.T) *heldQueue {
	t.Helper()
	ctx := context.Background()
	o := openOldSchema(t, 25, "release 24 on schema 25", "")
	o.exec("BEGIN;\n" + release24Code + "\nCOMMIT;")
	o.exec(`INSERT INTO drainer.schema_meta (name, value) VALUES ('code_revision', '16')
	      ON CONFLICT (name) DO UPDATE SET value = excluded.value`)
	o.exec(`SELECT drainer.enqueue('r1', 'due', 'charge', '', '{"amount": 1}')`)
	h := &heldQueue{old: o, url: o.conn.Config().ConnString()}
	h.producer = h.connect(t, "held-producer")
	if _, err := h.producer.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.producer.Exec(ctx, `SELECT drainer.enqueue('r1', 'held', 'charge', '', '{"amount": 2}')`); err != nil {
		t.Fatal(err)
	}
	return h
}

// connect opens a connection to the schema's database as application.
func (h *heldQueue) connect(t *testing.T, application string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(h.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = application
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// versions reads the schema's migration version and code revision.
func (h *heldQueue) versions(t *testing.T) (version int, codeRevision string) {
	t.Helper()
	err := h.old.conn.QueryRow(context.Background(), `SELECT (SELECT version FROM drainer.schema_version),
	        (SELECT value FROM drainer.schema_meta WHERE name = 'code_revision')`).Scan(&version, &codeRevision)
	if err != nil {
		t.Fatal(err)
	}
	return version, codeRevision
}

// lockTimeoutOf is the lock_timeout a connection's next statement runs with.
func lockTimeoutOf(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	var v string
	if err := conn.QueryRow(context.Background(), "SHOW lock_timeout").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// line returns the first line holding every one of parts, or "".
func (l *logBuffer) line(parts ...string) string {
	for line := range strings.Lines(l.String()) {
		found := true
		for _, p := range parts {
			found = found && strings.Contains(line, p)
		}
		if found {
			return line
		}
	}
	return ""
}

// waitFor polls cond until it holds, failing the test after hang.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(hang); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", hang, what)
		}
	}
}

// commitThenResult commits the producer's transaction and waits for the
// migration it held (what) to return, within hang; the result is put back
// for the cleanup that waits for it too.
func commitThenResult(t *testing.T, producer *pgx.Conn, done chan migrateResult, what string) migrateResult {
	t.Helper()
	if _, err := producer.Exec(context.Background(), "COMMIT"); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		done <- r
		return r
	case <-time.After(hang):
		t.Fatalf("the %s did not complete within %s of the producer's commit", what, hang)
		return migrateResult{}
	}
}

type migrateResult struct {
	applied int
	err     error
}

// TestUpgradeBesideAnOpenProducerKeepsTheDrainGoing upgrades a schema whose
// queue a producer's open transaction has written. While the upgrade
// retries, a claim (FOR UPDATE SKIP LOCKED on the queue) still completes:
// it queues behind the waiting ALTER TABLE for one lock_timeout at most,
// never for good. Each retry is logged with the holder's pid. Once the
// producer commits, the upgrade completes to the latest version and code
// revision, and the connection it ran on keeps its own lock_timeout.
func TestUpgradeBesideAnOpenProducerKeepsTheDrainGoing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := openHeldQueue(t)
	migrator := h.connect(t, "drainer-migrate")
	logs := &logBuffer{}
	opts := Options{LockTimeout: time.Second, LockWait: time.Hour, Log: slog.New(slog.NewJSONHandler(logs, nil))}
	done := make(chan migrateResult, 1)
	go func() {
		n, err := MigrateWith(ctx, migrator, "drainer", opts)
		done <- migrateResult{n, err}
	}()
	t.Cleanup(func() {
		// A failed test leaves the producer open: end it so that the
		// upgrade returns before the database is dropped.
		_, _ = h.producer.Exec(context.Background(), "ROLLBACK")
		select {
		case <-done:
		case <-time.After(hang):
			t.Errorf("the upgrade did not return within %s of the producer's end", hang)
		}
	})

	// The claim goes in once the upgrade waits for a lock (its ALTER
	// TABLE ahead of the claim in the queue's lock queue), or has retried.
	probe := h.connect(t, "drain-probe")
	migratorPID, producerPID := migrator.PgConn().PID(), h.producer.PgConn().PID()
	retried := fmt.Sprintf(`"holder_pid":%d`, producerPID)
	waitFor(t, "the upgrade to wait for a lock or retry", func() bool {
		var waiting bool
		err := probe.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks WHERE pid = $1 AND NOT granted)`, migratorPID).Scan(&waiting)
		return err != nil || waiting || logs.line(retried) != "" || len(done) > 0
	})
	if _, err := probe.Exec(ctx, "SET statement_timeout = '30s'"); err != nil {
		t.Fatal(err)
	}
	tx, err := probe.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var seq int64
	if err := tx.QueryRow(ctx, `SELECT seq FROM drainer.queue ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED`).Scan(&seq); err != nil {
		t.Fatalf("a claim while the upgrade waits for the queue's lock: %v (it must not queue behind the upgrade for good)", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	waitFor(t, "a retry logged naming the producer's pid "+fmt.Sprint(producerPID), func() bool { return logs.line(retried) != "" || len(done) > 0 })
	select {
	case r := <-done:
		done <- r
		t.Fatalf("the upgrade ended while the producer was open: %d applied, %v", r.applied, r.err)
	default:
	}
	line := logs.line(retried)
	t.Logf("retry: %s", line)
	for _, want := range []string{`"step":"migration 026_queue_payload_bytes.sql"`, `"holder_application_name":"held-producer"`, `"holder_state":"idle in transaction"`} {
		if !strings.Contains(line, want) {
			t.Errorf("retry logged as %s: no %s", line, want)
		}
	}

	r := commitThenResult(t, h.producer, done, "upgrade")
	if r.err != nil || r.applied != Latest()-25 {
		t.Fatalf("upgrade after the producer committed: %d applied, %v; want %d", r.applied, r.err, Latest()-25)
	}
	if v, err := Check(ctx, h.old.conn, "drainer"); err != nil || v != Latest() {
		t.Fatalf("after the upgrade: version %d, %v; want %d", v, err, Latest())
	}
	if got := lockTimeoutOf(t, migrator); got != "0" {
		t.Errorf("lock_timeout of the migrating connection after the upgrade: %s, want 0 (its own)", got)
	}
	var held int
	if err := h.old.conn.QueryRow(ctx, `SELECT count(*) FROM drainer.outbox WHERE step_id = 'held'`).Scan(&held); err != nil || held != 1 {
		t.Fatalf("the producer's row after the upgrade: %d (%v), want 1", held, err)
	}
}

// TestUpgradeGivesUpNamingTheHolder upgrades, with a short lock wait, a
// schema whose queue a producer's transaction left open has written: the
// upgrade fails naming the database, the step and the producer's session,
// and leaves the schema at its old version and code revision; the
// connection keeps its own lock_timeout.
func TestUpgradeGivesUpNamingTheHolder(t *testing.T) {
	t.Parallel()
	h := openHeldQueue(t)
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	migrator := h.connect(t, "drainer-migrate")
	_, err := MigrateWith(ctx, migrator, "drainer", Options{LockTimeout: 200 * time.Millisecond, LockWait: time.Second})
	var lw *LockWaitError
	if !errors.As(err, &lw) {
		t.Fatalf("upgrade beside an open producer with a 1s lock wait: %v, want a LockWaitError", err)
	}
	t.Logf("gave up: %v", err)
	pid := h.producer.PgConn().PID()
	if len(lw.Holders) == 0 || lw.Holders[0].PID != int(pid) {
		t.Fatalf("holders %+v, want the producer's pid %d first", lw.Holders, pid)
	}
	if got := lw.Holders[0]; got.State != "idle in transaction" || got.ApplicationName != "held-producer" || !strings.Contains(strings.Join(got.Relations, ","), "queue") {
		t.Errorf("holder %+v: want the producer's idle transaction, named, holding the queue", got)
	}
	for _, want := range []string{
		fmt.Sprintf("database %q", h.old.conn.Config().Database),
		"migration 026_queue_payload_bytes.sql",
		fmt.Sprintf("pid %d (idle in transaction", pid),
		`application_name "held-producer"`,
		"schema is at version 25",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q: no %q", err, want)
		}
	}
	if v, rev := h.versions(t); v != 25 || rev != "16" {
		t.Errorf("after the failed upgrade: version %d, code revision %s; want 25 and 16", v, rev)
	}
	if got := lockTimeoutOf(t, migrator); got != "0" {
		t.Errorf("lock_timeout of the migrating connection after the failure: %s, want 0 (its own)", got)
	}
	if _, err := h.producer.Exec(context.Background(), "COMMIT"); err != nil {
		t.Fatal(err)
	}
}

// TestCodeInstallBesideAnOpenProducerRetries reinstalls the code package
// (its triggers ON queue) of a schema at the latest version while a
// producer's transaction that enqueued with the installed code is open:
// the install is retried, logged under its own step, and completes once
// the producer commits.
func TestCodeInstallBesideAnOpenProducerRetries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := connectAtVersion(t, int32(Latest()))
	if _, err := Migrate(ctx, conn, "drainer", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `UPDATE drainer.schema_meta SET value = $1 WHERE name = 'code_revision'`, fmt.Sprint(CodeRevision-1)); err != nil {
		t.Fatal(err)
	}
	h := &heldQueue{old: &oldSchema{t: t, conn: conn}, url: conn.Config().ConnString()}
	producer := h.connect(t, "held-producer")
	if _, err := producer.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := producer.Exec(ctx, `SELECT drainer.enqueue('r1', 'held', 'charge', '', '{"amount": 2}')`); err != nil {
		t.Fatal(err)
	}
	migrator := h.connect(t, "drainer-migrate")
	logs := &logBuffer{}
	done := make(chan migrateResult, 1)
	go func() {
		n, err := MigrateWith(ctx, migrator, "drainer", Options{LockTimeout: 200 * time.Millisecond, LockWait: time.Hour, Log: slog.New(slog.NewJSONHandler(logs, nil))})
		done <- migrateResult{n, err}
	}()
	t.Cleanup(func() {
		_, _ = producer.Exec(context.Background(), "ROLLBACK")
		select {
		case <-done:
		case <-time.After(hang):
			t.Errorf("the install did not return within %s of the producer's end", hang)
		}
	})
	retried := fmt.Sprintf(`"holder_pid":%d`, producer.PgConn().PID())
	step := fmt.Sprintf(`"step":"code revision %d (functions, views and triggers)"`, CodeRevision)
	waitFor(t, "the install's retry logged naming the producer", func() bool { return logs.line(retried, step) != "" || len(done) > 0 })
	if len(done) > 0 {
		r := <-done
		done <- r
		t.Fatalf("the install ended while the producer was open: %v", r.err)
	}
	r := commitThenResult(t, producer, done, "install")
	if _, rev := h.versions(t); r.err != nil || rev != fmt.Sprint(CodeRevision) {
		t.Fatalf("install after the producer committed: %v, code revision %s; want %d", r.err, rev, CodeRevision)
	}
	if got := lockTimeoutOf(t, migrator); got != "0" {
		t.Errorf("lock_timeout of the migrating connection after the install: %s, want 0 (its own)", got)
	}
}

// TestMigrationsRunInTransactions: MigrateWith bounds a migration's lock
// waits with SET LOCAL, which holds only inside the transaction tern runs
// the migration in; a migration that disabled it would wait unbounded.
func TestMigrationsRunInTransactions(t *testing.T) {
	t.Parallel()
	names, err := migrate.FindMigrations(files)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		b, err := fs.ReadFile(files, name)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "tern: disable-tx") {
			t.Errorf("%s runs outside a transaction: its lock waits would not be bounded", name)
		}
	}
}
