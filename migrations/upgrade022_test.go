package migrations

import (
	"context"
	_ "embed"
	"slices"
	"strings"
	"testing"
	"time"
)

// Release 21's code package (code revision 13), as that release installed it.
//
//go:embed testdata/release21/code.sql
var release21Code string

// TestUpgradeTo022KeepsAnchors upgrades a release-21 schema whose audit
// release 21 rotated: chains anchored by its rotation (one anchor per
// chain, overwritten in place), chains that went on after their anchor,
// and a generation it anchored but did not truncate yet (its anchors
// stand for entries still there, the ones they replaced kept beside
// them). Every chain verifies before the upgrade and after it; the new
// rotation records release 21's anchors in the ledger, anchors the
// half-done generation again, verified, and truncates it; everything
// verifies after; and a chain release 21 anchored is protected now: a
// status changed with the triggers off, or its anchor's deletion, is
// reported.
func TestUpgradeTo022KeepsAnchors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := openOldSchema(t, 21, "release 21", "")
	conn, exec := o.conn, o.exec
	exec("BEGIN;\n" + release21Code + "\nCOMMIT;")
	exec(`INSERT INTO drainer.schema_meta (name, value) VALUES ('code_revision', '13')
	      ON CONFLICT (name) DO UPDATE SET value = excluded.value`)
	count := o.count
	verify := func(when string) {
		t.Helper()
		rows, err := conn.Query(ctx, `SELECT id, key, problem FROM drainer.audit_verify(1000)`)
		if err != nil {
			t.Fatalf("audit_verify %s: %v", when, err)
		}
		defer rows.Close()
		var problems []string
		for rows.Next() {
			var id int64
			var key, problem string
			if err := rows.Scan(&id, &key, &problem); err != nil {
				t.Fatal(err)
			}
			problems = append(problems, key+": "+problem)
		}
		if err := rows.Err(); err != nil || len(problems) != 0 {
			t.Fatalf("audit_verify %s: %v %v", when, problems, err)
		}
	}
	// rotate turns the audit's generations, retention and span zero, until
	// done says so.
	rotate := func(what string, done func() bool) []string {
		t.Helper()
		var steps []string
		for waits := 0; !done(); {
			var step string
			if err := conn.QueryRow(ctx, `SELECT drainer.rotate_audit(interval '0', interval '0')`).Scan(&step); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if step == "waiting" || step == "busy" {
				if waits++; waits > 30_000 {
					t.Fatalf("%s: waiting after %v", what, steps)
				}
				time.Sleep(2 * time.Millisecond) // another test's transaction
				continue
			}
			if steps = append(steps, step); len(steps) > 100 {
				t.Fatalf("%s: not after %v", what, steps)
			}
		}
		return steps
	}

	// Release 21: rows and notes, every chain anchored and truncated.
	exec(`SELECT drainer.enqueue('r1', 'a', 'charge', '', '{"amount": 1}')`)
	exec(`SELECT drainer.enqueue('r1', 'b', 'charge', '', '{"amount": 2}')`)
	exec(`SELECT drainer.enqueue('r1', 'c', 'charge', '', '{"amount": 3}')`)
	exec(`UPDATE drainer.outbox SET status = 'succeeded', attempts = 1 WHERE step_id = 'a'`)
	exec(`UPDATE drainer.outbox SET status = 'pending', attempts = 1, last_error = 'HTTP 503' WHERE step_id = 'b'`)
	exec(`SELECT drainer.audit_append('route:charge', 'operator:pause', NULL)`)
	exec(`SELECT drainer.audit_append('run:r9', 'agent:abort', 'wrong customer')`)
	rotate("release 21 truncates every generation", func() bool { return count(`SELECT count(*) FROM drainer.audit`) == 0 })
	// More entries on the anchored chains, then a generation anchored by
	// release 21 and not truncated yet.
	exec(`UPDATE drainer.outbox SET status = 'succeeded', attempts = 2, last_error = NULL WHERE step_id = 'b'`)
	exec(`SELECT drainer.audit_append('route:charge', 'operator:resume', NULL)`)
	exec(`SELECT drainer.enqueue('r2', 'x', 'refund', '', '{"amount": 4}')`)
	// Which generation release 21 anchors first depends on the steps
	// before (an empty one may come first): the rotation turns until the
	// one holding the new entries is anchored, and stops before it is
	// truncated.
	standing := func() int {
		return count(`SELECT count(*) FROM drainer.audit_anchors a
		      WHERE a.replaced IS NOT NULL AND EXISTS (SELECT 1 FROM drainer.audit e WHERE e.key = a.key AND e.hash = a.hash)`)
	}
	steps := rotate("release 21 anchors the generation of the new entries", func() bool { return standing() >= 2 })
	if n := count(`SELECT count(*) FROM drainer.audit_generations WHERE anchored_to IS NOT NULL`); n != 1 {
		t.Fatalf("%d generations anchored and not truncated after %v, want 1", n, steps)
	}
	verify("on release 21")
	anchors := count(`SELECT count(*) FROM drainer.audit_anchors`)

	if _, err := Migrate(ctx, conn, "drainer", nil); err != nil {
		t.Fatal(err)
	}
	verify("after the upgrade")
	if n := count(`SELECT count(*) FROM drainer.audit_anchors`) + count(`SELECT count(*) FROM drainer.audit_anchor_history`); n < anchors+2 {
		t.Fatalf("%d anchor versions after the upgrade, want release 21's %d and the ones they replaced", n, anchors)
	}

	// The new rotation: release 21's anchors go into the ledger, the
	// generation it anchored is anchored again, verified, and truncated.
	steps = rotate("the upgraded rotation", func() bool { return count(`SELECT count(*) FROM drainer.audit`) == 0 })
	if !slices.ContainsFunc(steps, func(s string) bool { return strings.HasPrefix(s, "truncated") }) {
		t.Fatalf("steps after the upgrade: %v, want the generation release 21 anchored truncated", steps)
	}
	if n := count(`SELECT count(*) FROM drainer.audit_ledger WHERE kind = 'anchors' AND epoch IS NULL AND items >= $1`, anchors); n != 1 {
		t.Fatalf("release 21's %d anchors are not recorded in the ledger (steps %v)", anchors, steps)
	}
	if n := count(`SELECT count(*) FROM drainer.audit_anchors WHERE record IS NULL OR status IS NULL AND key LIKE 'idem_v1_%'`); n != 0 {
		t.Fatalf("%d anchors of rows without a record or a status after the rotation", n)
	}
	verify("after the upgraded rotation")
	// New entries on chains release 21 anchored link to their anchors.
	exec(`UPDATE drainer.outbox SET status = 'cancelled' WHERE step_id = 'c'`)
	exec(`SELECT drainer.audit_append('route:charge', 'operator:pause', NULL)`)
	verify("after new entries on old chains")

	// A row whose entries release 21 anchored (its anchor kept no status,
	// and takes its row's when the ledger records it): a change made with
	// the triggers off since is told.
	exec(`ALTER TABLE drainer.queue DISABLE TRIGGER queue_audit_update`)
	exec(`UPDATE drainer.outbox SET status = 'cancelled' WHERE step_id = 'a'`)
	exec(`ALTER TABLE drainer.queue ENABLE TRIGGER queue_audit_update`)
	if n := count(`SELECT count(*) FROM drainer.audit_verify(1000) WHERE key = $1 AND problem LIKE '%not recorded%'`,
		o.keyOf("r1", "a", "charge")); n != 1 {
		t.Fatal("a change made with the triggers off on a row release 21 anchored is not reported")
	}

	// An anchor release 21 wrote, alone in standing for its chain, is
	// protected by the ledger now.
	exec(`DELETE FROM drainer.audit_anchors WHERE key = 'run:r9'`)
	if n := count(`SELECT count(*) FROM drainer.audit_verify(1000) WHERE problem LIKE '%no longer match%'`); n == 0 {
		t.Fatal("the deletion of an anchor release 21 wrote is not reported")
	}
}
