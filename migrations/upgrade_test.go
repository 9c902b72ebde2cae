package migrations

import (
	"context"
	"testing"

	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"
)

// TestUpgradeTo015KeepsEveryKey: a schema at version 14 with live rows,
// tombstones, an aborted run and audit chains is migrated to 15. Every key
// is in the key space (live ones with their canonical hash, pruned ones as
// tombstones), a re-enqueue of either is answered created = false, an
// operator's abort counts as a request, and the audit chains still verify.
func TestUpgradeTo015KeepsEveryKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := connectAtVersion(t, 14)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`SELECT drainer.enqueue('r1', 's1', 'charge', '', '{"amount": 2.50}')`)
	exec(`SELECT drainer.enqueue('r1', 's2', 'charge', '', '{"amount": 3}')`)
	exec(`SELECT drainer.enqueue('r2', 's1', 'charge', '', '{"amount": 1}')`)
	exec(`UPDATE drainer.outbox SET status = 'succeeded', attempts = 1, updated_at = now() - interval '1 day'
	       WHERE agent_run_id = 'r1' AND step_id = 's2'`)
	exec(`SELECT drainer.prune_rows('succeeded', now(), 100)`)
	exec(`SELECT drainer.abort_run_internal('r2', 'wrong customer', 'operator:alice')`)

	if _, err := Migrate(ctx, conn, "drainer", nil); err != nil {
		t.Fatal(err)
	}
	var live, pruned int
	if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pruned_at IS NULL), count(*) FILTER (WHERE pruned_at IS NOT NULL AND final_status = 'succeeded')
	        FROM drainer.keys`).Scan(&live, &pruned); err != nil {
		t.Fatal(err)
	}
	if live != 2 || pruned != 1 {
		t.Fatalf("key space after the upgrade: %d live, %d pruned; want 2 and 1", live, pruned)
	}
	var stones int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM drainer.tombstones`).Scan(&stones); err != nil || stones != 1 {
		t.Fatalf("tombstones view: %d rows (%v), want 1", stones, err)
	}
	for _, tc := range []struct{ step, payload string }{
		{"s1", `{"amount": 2.5}`}, // live, recorded before 015 as 2.50: equal as JSON values
		{"s2", `{"amount": 3}`},   // pruned before the upgrade
	} {
		var created bool
		if err := conn.QueryRow(ctx, `SELECT created FROM drainer.enqueue('r1', $1, 'charge', '', $2::jsonb)`, tc.step, tc.payload).Scan(&created); err != nil {
			t.Fatalf("re-enqueue of %s after the upgrade: %v", tc.step, err)
		}
		if created {
			t.Fatalf("re-enqueue of %s after the upgrade answered created = true", tc.step)
		}
	}
	var requests int
	if err := conn.QueryRow(ctx, `SELECT abort_requests FROM drainer.runs WHERE agent_run_id = 'r2'`).Scan(&requests); err != nil || requests != 1 {
		t.Fatalf("operator abort recorded before the upgrade: abort_requests %d (%v), want 1", requests, err)
	}
	var broken int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM drainer.audit_verify(100)`).Scan(&broken); err != nil || broken != 0 {
		t.Fatalf("audit_verify after the upgrade: %d problems (%v)", broken, err)
	}

	// The upgraded schema's functions, views and triggers are a fresh one's.
	fresh, err := pgx.Connect(ctx, dbtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fresh.Close(context.Background()) })
	if _, err := Migrate(ctx, fresh, "drainer", nil); err != nil {
		t.Fatal(err)
	}
	want, got := definitions(t, fresh), definitions(t, conn)
	for name, def := range want {
		if got[name] != def {
			t.Errorf("%s differs between a fresh and an upgraded schema:\n--- fresh\n%s\n--- upgraded\n%s", name, def, got[name])
		}
	}
	if len(got) != len(want) {
		t.Errorf("the upgraded schema has %d definitions, a fresh one %d", len(got), len(want))
	}
}

// connectAtVersion returns a connection to a fresh database whose drainer
// schema is migrated to version (no code package installed: the functions
// are those the numbered migrations define).
func connectAtVersion(t *testing.T, version int32) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, "CREATE SCHEMA drainer"); err != nil {
		t.Fatal(err)
	}
	m, err := migrate.NewMigrator(ctx, conn, "drainer.schema_version")
	if err != nil {
		t.Fatal(err)
	}
	m.Data["schema"] = "drainer"
	if err := m.LoadMigrations(files); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, version); err != nil {
		t.Fatal(err)
	}
	return conn
}
