package migrations

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestUpgradeTo028KeepsEveryChainFindable upgrades a release-27 schema
// (this release's code package, which 028 does not change) whose audit
// holds entries in two generations, one of them edited by hand. After the
// upgrade every generation's key index is a hash index and the btree is
// gone, a look-up by key can use it, every key's entries are found by key
// as before (same ids, same order), each chain's head is its last entry,
// and the edited entry is the one problem audit_verify reports, before
// and after.
func TestUpgradeTo028KeepsEveryChainFindable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := openOldSchema(t, 27, "release 27", "")
	conn, exec := o.conn, o.exec
	code, _, err := Code("drainer")
	if err != nil {
		t.Fatal(err)
	}
	// The code's rotation reads the sweep's place (audit_sweep, migration
	// 032): an empty one here, dropped before the upgrade makes its own.
	exec(`CREATE TABLE drainer.audit_sweep (id boolean PRIMARY KEY DEFAULT true CHECK (id), after_record bigint)`)
	exec("BEGIN;\n" + code + "\nCOMMIT;")
	query := func(sql string, args ...any) []string {
		t.Helper()
		rows, _ := conn.Query(ctx, sql, args...)
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return out
	}
	// history is every key's entries, found by key: "key: id id …" each.
	history := func() []string {
		t.Helper()
		var out []string
		for _, key := range query(`SELECT DISTINCT key FROM drainer.audit ORDER BY key`) {
			ids := query(`SELECT id::text FROM drainer.audit WHERE key = $1 ORDER BY id`, key)
			head := query(`SELECT encode(drainer.audit_head($1), 'hex')`, key)
			last := query(`SELECT encode(hash, 'hex') FROM drainer.audit WHERE key = $1 ORDER BY id DESC LIMIT 1`, key)
			if !slices.Equal(head, last) {
				t.Fatalf("the head of %s is %v, its last entry's hash %v", key, head, last)
			}
			out = append(out, key+": "+strings.Join(ids, " "))
		}
		return out
	}

	// Release 27: entries in the generation current at first, a flip,
	// more entries (some on the same chains) in the next.
	exec(`SELECT drainer.enqueue('r1', 'a', 'charge', '', '{"amount": 1}')`)
	exec(`SELECT drainer.enqueue('r1', 'b', 'charge', '', '{"amount": 2}')`)
	exec(`UPDATE drainer.outbox SET status = 'pending', attempts = 1, last_error = 'HTTP 503' WHERE step_id = 'b'`)
	exec(`SELECT drainer.audit_append('route:charge', 'operator:pause', NULL)`)
	// (a retention of a day: nothing is anchored or truncated)
	var steps []string
	for !slices.Contains(steps, "flipped") {
		if steps = append(steps, query(`SELECT drainer.rotate_audit(interval '1 day', interval '0')`)...); len(steps) > 10 {
			t.Fatalf("rotate_audit: %v, want flipped", steps)
		}
	}
	exec(`UPDATE drainer.outbox SET status = 'succeeded', attempts = 2, last_error = NULL WHERE step_id = 'b'`)
	exec(`UPDATE drainer.outbox SET status = 'succeeded', attempts = 1 WHERE step_id = 'a'`)
	exec(`SELECT drainer.enqueue('r2', 'x', 'refund', '', '{"amount": 3}')`)
	exec(`SELECT drainer.audit_append('route:charge', 'operator:resume', NULL)`)
	if parts := query(`SELECT DISTINCT part::text FROM drainer.audit ORDER BY 1`); len(parts) != 2 {
		t.Fatalf("entries in generations %v, want two", parts)
	}
	// The tampering: an entry's reason edited by hand.
	edited := o.keyOf("r1", "b", "charge")
	exec(`UPDATE drainer.audit SET reason = 'nothing happened'
	       WHERE id = (SELECT min(id) FROM drainer.audit WHERE key = $1)`, edited)
	problems := func(when string) {
		t.Helper()
		p := query(`SELECT key || ': ' || problem FROM drainer.audit_verify(1000)`)
		if len(p) != 1 || !strings.HasPrefix(p[0], edited+": ") || !strings.Contains(p[0], "edited") {
			t.Fatalf("audit_verify %s: %v, want the edited entry of %s alone", when, p, edited)
		}
	}
	problems("before the upgrade")
	before := history()

	exec(`DROP TABLE drainer.audit_sweep`)
	if _, err := Migrate(ctx, conn, "drainer", nil); err != nil {
		t.Fatal(err)
	}
	indexes := query(`SELECT c.relname || ' ' || i.indexdef FROM pg_indexes i
	                    JOIN pg_class c ON c.relname = i.tablename AND c.relnamespace = 'drainer'::regnamespace
	                   WHERE i.schemaname = 'drainer' AND c.relname ~ '^audit(_p[0-3])?$' AND i.indexdef NOT LIKE '%(id)%'
	                   ORDER BY 1`)
	if len(indexes) != 5 {
		t.Fatalf("the audit's indexes other than on id: %v, want the partitioned one and one per generation", indexes)
	}
	for _, def := range indexes {
		if !strings.HasSuffix(def, "USING hash (key)") {
			t.Fatalf("after the upgrade: %s, want a hash index on key", def)
		}
	}
	plan := strings.Join(query(`EXPLAIN SELECT id FROM drainer.audit WHERE key = 'k'`), "\n")
	if !strings.Contains(plan, "key_hash_idx") {
		exec(`SET enable_seqscan = off`)
		if plan = strings.Join(query(`EXPLAIN SELECT id FROM drainer.audit WHERE key = 'k'`), "\n"); !strings.Contains(plan, "key_hash_idx") {
			t.Fatalf("a look-up by key does not use the hash index:\n%s", plan)
		}
		exec(`RESET enable_seqscan`)
	}
	if after := history(); !slices.Equal(before, after) {
		t.Fatalf("entries by key after the upgrade:\n%v\nbefore:\n%v", after, before)
	}
	problems("after the upgrade")
	// The chains go on: a new entry on an old chain links to its head.
	exec(`SELECT drainer.audit_append('route:charge', 'operator:pause', NULL)`)
	exec(`UPDATE drainer.outbox SET status = 'succeeded', attempts = 1 WHERE step_id = 'x'`)
	problems("after new entries on the old chains")
}
