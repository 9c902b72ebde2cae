package migrations

import (
	"context"
	_ "embed"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Release 19: its code package (code revision 3) and its claim, as that
// release installed and sent them.
var (
	//go:embed testdata/release19/code.sql
	release19Code string
	//go:embed testdata/release19/claim.sql
	release19Claim string
)

// TestUpgradeTo020KeepsRowsInFlight upgrades a release-19 schema that holds
// rows pending, in flight (leased by a release-19 replica), parked, an open
// saga with its compensation queued, a pruned key and audit chains, to the
// queue partitioned by generation, and checks that nothing is lost or
// changed, that the old replica's completion of its leased row lands
// (fenced by its lease, audited), that its claim keeps working on the rows
// of before and after the upgrade, that the saga goes on, that the
// rotation then moves the settled rows out of the new generation and
// truncates it, and that every audit chain verifies throughout.
func TestUpgradeTo020KeepsRowsInFlight(t *testing.T) {
	ctx := context.Background()
	conn := connectAtVersion(t, 19)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%.80s: %v", sql, err)
		}
	}
	exec("BEGIN;\n" + release19Code + "\nCOMMIT;")
	exec(`INSERT INTO drainer.schema_meta (name, value) VALUES ('code_revision', '3')
	      ON CONFLICT (name) DO UPDATE SET value = excluded.value`)
	keyOf := func(run, step, tool string) string {
		t.Helper()
		var k string
		if err := conn.QueryRow(ctx, `SELECT drainer.idempotency_key($1, $2, $3, '')`, run, step, tool).Scan(&k); err != nil {
			t.Fatal(err)
		}
		return k
	}
	type claimed struct {
		Seq   int64
		Key   string
		Kind  string
		Token pgtype.UUID
	}
	oldClaim := func(limit int) []claimed {
		t.Helper()
		rows, err := conn.Query(ctx, release19Claim, limit, 60000, "old-replica")
		if err != nil {
			t.Fatalf("release 19 claim: %v", err)
		}
		var out []claimed
		for rows.Next() {
			v, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, claimed{Seq: v[0].(int64), Key: v[1].(string), Kind: v[6].(string), Token: pgtype.UUID{Bytes: v[9].([16]byte), Valid: true}})
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("release 19 claim: %v", err)
		}
		return out
	}
	// complete is the completion release 19 sends (complete_rows, whose
	// signature this release keeps).
	complete := func(c claimed, status string, code int) int {
		t.Helper()
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM drainer.complete_rows($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, true)`,
			[]int64{c.Seq}, []pgtype.UUID{c.Token}, []string{status}, []int32{0}, []int64{-1}, []*string{nil}, []*string{nil},
			[]string{`{"id": "x"}`}, []int32{int32(code)}, []bool{false}, []int32{1}).Scan(&n)
		if err != nil {
			t.Fatalf("release 19 completion: %v", err)
		}
		return n
	}
	verify := func(when string) {
		t.Helper()
		var problems int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM drainer.audit_verify(1000)`).Scan(&problems); err != nil || problems != 0 {
			t.Fatalf("audit_verify %s: %d problems, %v", when, problems, err)
		}
	}

	// Release 19: a row in flight, one waiting, one parked, a saga whose
	// compensation is queued, a pruned key.
	exec(`SELECT drainer.enqueue('r1', 'flight', 'charge', '', '{"amount": 1}')`)
	first := oldClaim(1)
	if len(first) != 1 {
		t.Fatalf("release 19 claim before the upgrade leased %d rows", len(first))
	}
	exec(`SELECT drainer.enqueue('r1', 'waiting', 'charge', '', '{"amount": 2}')`)
	exec(`SELECT drainer.enqueue('r1', 'parked', 'ship', '', '{"order": 7}')`)
	exec(`UPDATE drainer.outbox SET status = 'outcome_unknown', attempts = 1, updated_at = now() WHERE step_id = 'parked'`)
	exec(`SELECT drainer.enqueue('r2', 'a', 'charge', '', '{"amount": 3}')`)
	exec(`UPDATE drainer.outbox SET status = 'succeeded', attempts = 1, response = '{"id": "ch_1"}', updated_at = now() WHERE agent_run_id = 'r2'`)
	exec(`SELECT drainer.abort_run_internal('r2', 'wrong customer', 'operator:alice')`)
	var state string
	if err := conn.QueryRow(ctx, `SELECT drainer.advance_saga('r2', ARRAY['charge'], ARRAY['refund'])`).Scan(&state); err != nil || state != "compensating" {
		t.Fatalf("saga before the upgrade: %q, %v", state, err)
	}
	exec(`SELECT drainer.enqueue('r3', 'old', 'charge', '', '{"amount": 4}')`)
	exec(`UPDATE drainer.outbox SET status = 'succeeded', attempts = 1, updated_at = now() - interval '1 day' WHERE agent_run_id = 'r3'`)
	exec(`SELECT drainer.prune_rows('succeeded', now() - interval '1 hour', 100)`)
	verify("before the upgrade")

	type row struct {
		Key, Status string
		Attempts    int
		Payload     string
	}
	snapshot := func() map[string]row {
		t.Helper()
		rows, err := conn.Query(ctx, `SELECT key, status, attempts, payload::text FROM drainer.outbox ORDER BY seq`)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]row{}
		var r row
		if _, err := pgx.ForEachRow(rows, []any{&r.Key, &r.Status, &r.Attempts, &r.Payload}, func() error { out[r.Key] = r; return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	before := snapshot()
	if len(before) != 5 {
		t.Fatalf("release 19 outbox holds %d rows, want 5: %v", len(before), before)
	}

	if _, err := Migrate(ctx, conn, "drainer", nil); err != nil {
		t.Fatal(err)
	}
	if v, err := Check(ctx, conn, "drainer"); err != nil || v != 20 {
		t.Fatalf("schema after the upgrade: version %d, %v", v, err)
	}
	after := snapshot()
	for k, r := range before {
		if after[k] != r {
			t.Errorf("row %s: %+v before the upgrade, %+v after", k, r, after[k])
		}
	}
	if len(after) != len(before) {
		t.Errorf("%d rows after the upgrade, %d before", len(after), len(before))
	}
	var outside int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM drainer.queue WHERE gen <> 0`).Scan(&outside); err != nil || outside != 0 {
		t.Fatalf("%d rows outside the settled partition after the upgrade (%v): the old table becomes generation 0 as it is", outside, err)
	}
	verify("after the upgrade")

	// The old replica writes the answer of the row it leased before the
	// upgrade, fenced by its lease; a stale lease is refused.
	if n := complete(first[0], "succeeded", 201); n != 1 {
		t.Fatalf("release 19 completion after the upgrade wrote %d rows, want its 1 leased row", n)
	}
	stale := first[0]
	stale.Token = pgtype.UUID{Bytes: [16]byte{1}, Valid: true}
	if n := complete(stale, "failed", 500); n != 0 {
		t.Fatalf("a completion under a stale lease wrote %d rows, want 0", n)
	}

	// A row enqueued after the upgrade goes to the current generation; the
	// old replica's claim takes it with the rows of before, oldest first.
	exec(`SELECT drainer.enqueue('r4', 'new', 'charge', '', '{"amount": 5}')`)
	var gen int
	if err := conn.QueryRow(ctx, `SELECT q.gen FROM drainer.queue q JOIN drainer.intents i ON i.seq = q.seq WHERE i.key = $1`,
		keyOf("r4", "new", "charge")).Scan(&gen); err != nil || gen != 1 {
		t.Fatalf("a row enqueued after the upgrade is in generation %d (%v), want 1", gen, err)
	}
	got := oldClaim(10)
	kinds := map[string]string{}
	for _, c := range got {
		kinds[c.Key] = c.Kind
	}
	compKey := keyOf("r2", "a", "refund")
	if len(got) != 3 || kinds[keyOf("r1", "waiting", "charge")] != "forward" || kinds[compKey] != "compensation" ||
		kinds[keyOf("r4", "new", "charge")] != "forward" {
		t.Fatalf("release 19 claim after the upgrade leased %+v; want the waiting row, the compensation and the new row", got)
	}
	for _, c := range got {
		if n := complete(c, "succeeded", 200); n != 1 {
			t.Fatalf("completion of %s wrote %d rows", c.Key, n)
		}
	}
	var status string
	if err := conn.QueryRow(ctx, `SELECT status FROM drainer.outbox WHERE key = $1`, keyOf("r2", "a", "charge")).Scan(&status); err != nil || status != "compensated" {
		t.Fatalf("the forward row of the saga after its compensation succeeded: %q, %v", status, err)
	}
	if err := conn.QueryRow(ctx, `SELECT status FROM drainer.outbox WHERE key = $1`, keyOf("r1", "parked", "ship")).Scan(&status); err != nil || status != "outcome_unknown" {
		t.Fatalf("the parked row after the upgrade: %q, %v", status, err)
	}
	var created bool
	if err := conn.QueryRow(ctx, `SELECT created FROM drainer.enqueue('r3', 'old', 'charge', '', '{"amount": 4.0}')`).Scan(&created); err != nil || created {
		t.Fatalf("re-enqueue of a key pruned before the upgrade: created %v (%v), want false", created, err)
	}
	verify("after the old replica's claims and completions")

	// The rotation moves the new generation's settled row out and
	// truncates it; nothing is appended to any chain by the move.
	var entries, entriesAfter int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM drainer.audit`).Scan(&entries); err != nil {
		t.Fatal(err)
	}
	var steps []string
	for range 100 {
		var step string
		if err := conn.QueryRow(ctx, `SELECT drainer.rotate_queue(1000000, 1000000, interval '1 millisecond', 100)`).Scan(&step); err != nil {
			t.Fatal(err)
		}
		if step == "idle" || step == "waiting" {
			break
		}
		steps = append(steps, step)
		time.Sleep(2 * time.Millisecond) // the generation must be older than its flip age
	}
	if len(steps) == 0 || steps[len(steps)-1] != "truncated" {
		t.Fatalf("rotation steps after the upgrade: %v, want the new generation truncated", steps)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM drainer.queue WHERE gen <> 0`).Scan(&outside); err != nil || outside != 0 {
		t.Fatalf("%d rows outside the settled partition after the rotation (%v)", outside, err)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM drainer.audit`).Scan(&entriesAfter); err != nil || entriesAfter != entries {
		t.Fatalf("the rotation appended %d audit entries (%v)", entriesAfter-entries, err)
	}
	verify("after the rotation")
}
