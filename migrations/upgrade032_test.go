package migrations

import (
	"context"
	_ "embed"
	"strings"
	"testing"
)

// Release 31's code package (code revision 33), as that release installed it.
//
//go:embed testdata/release31/code.sql
var release31Code string

// TestUpgradeTo032RetiresForgottenAnchors upgrades a release-31 schema
// whose anchors stayed for good: the anchors of keys pruned and forgotten
// (no row, no tombstone, no entry), of an operator's note on a route, of
// a pending row whose entries were truncated, and of a forgotten key
// whose anchor was edited before the upgrade. Right after the upgrade
// nothing changed and the edit is the one problem; the first sweep (which
// the upgrade starts) removes the forgotten chains' anchors but the
// edited one, keeps the row's, and the edit is still the one problem;
// a forgotten key enqueued again starts a chain that verifies.
func TestUpgradeTo032RetiresForgottenAnchors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := openOldSchema(t, 31, "release 31", "")
	conn, exec := o.conn, o.exec
	exec("BEGIN;\n" + release31Code + "\nCOMMIT;")
	exec(`INSERT INTO drainer.schema_meta (name, value) VALUES ('code_revision', '33')
	      ON CONFLICT (name) DO UPDATE SET value = excluded.value`)
	count, problems := o.count, o.problems
	rotate := func(when string, done string) []string {
		t.Helper()
		var steps []string
		for count(done) == 0 {
			var step string
			if err := conn.QueryRow(ctx, `SELECT drainer.rotate_audit(interval '0', interval '0')`).Scan(&step); err != nil {
				t.Fatalf("rotate_audit %s: %v", when, err)
			}
			if step != "waiting" && step != "busy" {
				steps = append(steps, step)
			}
			if len(steps) > 100 {
				t.Fatalf("rotate_audit %s: %v", when, steps)
			}
		}
		return steps
	}

	// Release 31: three rows succeeded and one pending, a note on a route;
	// the succeeded rows pruned and their tombstones forgotten; every
	// entry anchored and truncated.
	for _, step := range []string{"a", "b", "c", "d"} {
		exec(`SELECT drainer.enqueue('r1', $1, 'charge', '', '{"amount": 1}')`, step)
	}
	exec(`UPDATE drainer.outbox SET status = 'succeeded', attempts = 1 WHERE step_id <> 'd'`)
	exec(`SELECT drainer.audit_append('route:charge', 'operator:pause', NULL)`)
	exec(`SELECT drainer.prune_rows('succeeded', now() + interval '1 second', 100)`)
	exec(`DELETE FROM drainer.keys WHERE pruned_at IS NOT NULL`) // the tombstones' age passed
	rotate("on release 31", `SELECT count(*) FROM drainer.audit_generations WHERE ready AND NOT current
	                          AND NOT EXISTS (SELECT 1 FROM drainer.audit)`)
	if n := count(`SELECT count(*) FROM drainer.audit_anchors`); n != 5 {
		t.Fatalf("release 31 kept %d anchors, want 5 (four rows' and the route's)", n)
	}
	edited, pending := o.keyOf("r1", "a", "charge"), o.keyOf("r1", "d", "charge")
	exec(`UPDATE drainer.audit_anchors SET attempts = 7 WHERE key = $1`, edited)
	if p := problems("on release 31"); len(p) != 1 || !strings.Contains(p[edited], "edited") {
		t.Fatalf("on release 31: %v, want the edited anchor of %s alone", p, edited)
	}

	if _, err := Migrate(ctx, conn, "drainer", nil); err != nil {
		t.Fatal(err)
	}
	if n := count(`SELECT count(*) FROM drainer.audit_anchors`); n != 5 {
		t.Fatalf("the upgrade itself left %d anchors, want the 5 there were", n)
	}
	if p := problems("after the upgrade"); len(p) != 1 || !strings.Contains(p[edited], "edited") {
		t.Fatalf("after the upgrade: %v, want the edited anchor of %s alone", p, edited)
	}
	steps := rotate("after the upgrade", `SELECT count(*) FROM drainer.audit_sweep WHERE after_record IS NULL`)
	left := map[string]bool{}
	rows, err := conn.Query(ctx, `SELECT key FROM drainer.audit_anchors`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		left[k] = true
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if len(left) != 2 || !left[edited] || !left[pending] {
		t.Fatalf("after the sweep %v the anchors of %v are left, want the edited one (%s) and the pending row's (%s)",
			steps, left, edited, pending)
	}
	if p := problems("after the sweep"); len(p) != 1 || !strings.Contains(p[edited], "edited") {
		t.Fatalf("after the sweep: %v, want the edited anchor of %s alone", p, edited)
	}
	if n := count(`SELECT count(*) FROM drainer.audit_ledger WHERE kind = 'retired'`); n != 1 {
		t.Fatalf("%d retired records after the sweep, want 1", n)
	}

	// A forgotten key, enqueued again, and the route paused again: new
	// chains, from nothing.
	exec(`SELECT drainer.enqueue('r1', 'b', 'charge', '', '{"amount": 1}')`)
	exec(`SELECT drainer.audit_append('route:charge', 'operator:resume', NULL)`)
	if p := problems("after new chains"); len(p) != 1 || !strings.Contains(p[edited], "edited") {
		t.Fatalf("after new chains on forgotten keys: %v, want the edited anchor of %s alone", p, edited)
	}
}
