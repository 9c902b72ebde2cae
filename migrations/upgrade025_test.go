package migrations

import (
	"context"
	_ "embed"
	"strings"
	"testing"
)

// Release 24's code package (code revision 16), as that release installed it.
//
//go:embed testdata/release24/code.sql
var release24Code string

// TestUpgradeTo025WitnessesTombstones upgrades a release-24 schema whose
// retention pruned rows into tombstones that keep no audit head (one of
// them tampered with before the upgrade: its status rewritten). After the
// upgrade every tombstone holds its chain's head, the tampering made
// before it is still reported and nothing else is, and a forged entry
// ending the chain of a key release 24 pruned, in the status its
// tombstone records, is reported: the end of every pruned chain is
// witnessed from the upgrade on.
func TestUpgradeTo025WitnessesTombstones(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := openOldSchema(t, 24, "release 24", "")
	conn, exec := o.conn, o.exec
	exec("BEGIN;\n" + release24Code + "\nCOMMIT;")
	exec(`INSERT INTO drainer.schema_meta (name, value) VALUES ('code_revision', '16')
	      ON CONFLICT (name) DO UPDATE SET value = excluded.value`)
	count, problems := o.count, o.problems

	// Release 24: rows cancelled at their enqueue into an aborted run (a
	// chain of one entry each), and a succeeded row, all pruned.
	exec(`SELECT drainer.abort_run('r3', 'wrong customer')`)
	exec(`SELECT drainer.enqueue('r3', 'a', 'charge', '', '{"amount": 1}')`)
	exec(`SELECT drainer.enqueue('r3', 'b', 'charge', '', '{"amount": 2}')`)
	exec(`SELECT drainer.advance_saga('r3', '{}'::text[], '{}'::text[])`)
	exec(`SELECT drainer.enqueue('r1', 'a', 'charge', '', '{"amount": 3}')`)
	exec(`UPDATE drainer.outbox SET status = 'succeeded', attempts = 1 WHERE agent_run_id = 'r1'`)
	for _, status := range []string{"cancelled", "succeeded"} {
		exec(`SELECT drainer.prune_rows($1, now() + interval '1 second', 100)`, status)
	}
	if n := count(`SELECT count(*) FROM drainer.keys WHERE pruned_at IS NOT NULL`); n != 3 {
		t.Fatalf("release 24 pruned %d rows into tombstones, want 3", n)
	}
	// The tampering before the upgrade: a tombstone's status rewritten.
	tampered := o.keyOf("r3", "b", "charge")
	exec(`UPDATE drainer.keys SET final_status = 'succeeded' WHERE key = $1`, tampered)
	if p := problems("on release 24"); len(p) != 1 || p[tampered] == "" {
		t.Fatalf("on release 24: %v, want the rewritten tombstone of %s alone", p, tampered)
	}

	if _, err := Migrate(ctx, conn, "drainer", nil); err != nil {
		t.Fatal(err)
	}
	if n := count(`SELECT count(*) FROM drainer.keys k WHERE k.pruned_at IS NOT NULL
	      AND k.audit_head IS DISTINCT FROM (SELECT a.hash FROM drainer.audit a WHERE a.key = k.key ORDER BY a.id DESC LIMIT 1)`); n != 0 {
		t.Fatalf("%d tombstones without their chain's head after the upgrade", n)
	}
	if p := problems("after the upgrade"); len(p) != 1 || !strings.Contains(p[tampered], "not recorded") {
		t.Fatalf("after the upgrade: %v, want the rewritten tombstone of %s alone", p, tampered)
	}

	// A forged cancel, hashed right, linked to the last entry, with a new
	// id, ending the one-entry chain of a key release 24 pruned cancelled.
	forged := o.keyOf("r3", "a", "charge")
	exec(`INSERT INTO drainer.audit (id, key, at, event, from_status, to_status, attempts, actor, prev_hash, hash, part)
	      SELECT nextval('drainer.audit_entry_id'), f.key, f.at, 'operator:cancel', f.to_status, 'cancelled', f.attempts,
	             'mallory', f.hash,
	             drainer.audit_hash(f.hash, f.key, f.at, 'operator:cancel', f.to_status, 'cancelled', f.attempts, NULL, 'mallory', NULL, NULL),
	             f.part
	        FROM drainer.audit f WHERE f.key = $1`, forged)
	p := problems("after a forged entry")
	if len(p) != 2 || !strings.Contains(p[forged], "after it was pruned") || p[tampered] == "" {
		t.Fatalf("after a forged entry ending %s's chain: %v, want it reported beside %s", forged, p, tampered)
	}
}
