package migrations

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestFailedUpgradeLeavesTheQueueWritable upgrades a release-19 schema
// while a session holds the audit table, so that a migration after 020
// cannot take its lock and migrate gives up. Migration 020 makes the queue
// refuse every write until the code package is installed: had it been
// committed alone, every producer's enqueue and every replica's claim
// would be refused (SQLSTATE 55000) until migrate ran again. The schema
// must instead be left as it was, release 19's enqueue working, and a
// second migrate must finish the upgrade.
func TestFailedUpgradeLeavesTheQueueWritable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := openOldSchema(t, 19, "release 19", release19Claim)
	o.exec("BEGIN;\n" + release19Code + "\nCOMMIT;")
	o.exec(`INSERT INTO drainer.schema_meta (name, value) VALUES ('code_revision', '3')
	      ON CONFLICT (name) DO UPDATE SET value = excluded.value`)
	o.exec(`SELECT drainer.enqueue('r1', 'before', 'charge', '', '{"amount": 1}')`)

	h := &heldQueue{old: o, url: o.conn.Config().ConnString()}
	holder := h.connect(t, "audit-reader")
	if _, err := holder.Exec(ctx, "BEGIN; SELECT count(*) FROM drainer.audit"); err != nil {
		t.Fatal(err)
	}
	_, err := MigrateWith(ctx, o.conn, "drainer", Options{LockTimeout: 100 * time.Millisecond})
	var lw *LockWaitError
	if !errors.As(err, &lw) {
		t.Fatalf("migrate with the audit table held: %v, want a *LockWaitError", err)
	}
	if !strings.Contains(err.Error(), "021_audit_generations") || !strings.Contains(err.Error(), "version 19") {
		t.Fatalf("the lock wait's error names neither the step held nor the version left: %v", err)
	}
	if v, rev := h.versions(t); v != 19 || rev != "3" {
		t.Fatalf("after the failed upgrade the schema is at version %d with code revision %s, want 19 and 3 as before", v, rev)
	}
	// Release 19's producers and replicas go on: with the audit still
	// held, and after.
	o.exec(`SELECT drainer.enqueue('r1', 'held', 'charge', '', '{"amount": 2}')`)
	if _, err := holder.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	o.exec(`SELECT drainer.enqueue('r1', 'after', 'charge', '', '{"amount": 3}')`)
	if got := o.claim(10); len(got) != 3 {
		t.Fatalf("release 19's claim after the failed upgrade leased %d rows, want 3", len(got))
	}

	if _, err := Migrate(ctx, o.conn, "drainer", nil); err != nil {
		t.Fatalf("migrate again: %v", err)
	}
	if v, err := Check(ctx, o.conn, "drainer"); err != nil || v != Latest() {
		t.Fatalf("schema after the second migrate: version %d, %v", v, err)
	}
	if n := o.count(`SELECT count(*) FROM pg_catalog.pg_trigger WHERE tgname = 'queue_migrating'`); n != 0 {
		t.Fatalf("%d queue_migrating triggers left after the upgrade", n)
	}
	o.exec(`SELECT drainer.enqueue('r1', 'upgraded', 'charge', '', '{"amount": 4}')`)
	if n := o.count(`SELECT count(*) FROM drainer.outbox WHERE agent_run_id = 'r1'`); n != 4 {
		t.Fatalf("the outbox holds %d of run r1's 4 rows after the upgrade", n)
	}
}
