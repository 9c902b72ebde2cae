package migrations

import (
	"context"
	_ "embed"
	"testing"
	"time"

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
// truncates it, and that every audit chain verifies throughout. The same
// upgrade passes 021: the old audit table becomes generation 0 and the
// entries written after it go to generation 1, with later ids.
func TestUpgradeTo020KeepsRowsInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := openOldSchema(t, 19, "release 19", release19Claim)
	conn, exec, keyOf, oldClaim := o.conn, o.exec, o.keyOf, o.claim
	exec("BEGIN;\n" + release19Code + "\nCOMMIT;")
	exec(`INSERT INTO drainer.schema_meta (name, value) VALUES ('code_revision', '3')
	      ON CONFLICT (name) DO UPDATE SET value = excluded.value`)
	// complete is the completion release 19 sends (complete_rows, whose
	// signature this release keeps).
	complete := func(c oldClaimed, status string, code int) int {
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
	first := o.seedRowsInFlight()
	verify("before the upgrade")
	before := o.snapshot()
	if len(before) != 5 {
		t.Fatalf("release 19 outbox holds %d rows, want 5: %v", len(before), before)
	}

	if _, err := Migrate(ctx, conn, "drainer", nil); err != nil {
		t.Fatal(err)
	}
	if v, err := Check(ctx, conn, "drainer"); err != nil || v != Latest() {
		t.Fatalf("schema after the upgrade: version %d, %v", v, err)
	}
	o.sameRows(before, o.snapshot())
	var outside int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM drainer.queue WHERE gen <> 0`).Scan(&outside); err != nil || outside != 0 {
		t.Fatalf("%d rows outside the settled partition after the upgrade (%v): the old table becomes generation 0 as it is", outside, err)
	}
	verify("after the upgrade")
	// The audit table before 021 is generation 0, closed; new entries go
	// to generation 1, with ids after the old ones.
	var oldMax int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE part <> 0), coalesce(max(id), 0) FROM drainer.audit`).Scan(&outside, &oldMax); err != nil || outside != 0 || oldMax == 0 {
		t.Fatalf("audit after the upgrade: %d entries outside generation 0, last id %d (%v)", outside, oldMax, err)
	}

	// The old replica writes the answer of the row it leased before the
	// upgrade, fenced by its lease; a stale lease is refused.
	if n := complete(first, "succeeded", 201); n != 1 {
		t.Fatalf("release 19 completion after the upgrade wrote %d rows, want its 1 leased row", n)
	}
	stale := first
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
	var newEntries, wrongPart, lowID int
	if err := conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE part <> 1), count(*) FILTER (WHERE id <= $1)
	      FROM drainer.audit WHERE part <> 0 OR id > $1`, oldMax).Scan(&newEntries, &wrongPart, &lowID); err != nil ||
		newEntries == 0 || wrongPart != 0 || lowID != 0 {
		t.Fatalf("entries written after the upgrade: %d, %d outside generation 1, %d with an old id (%v)", newEntries, wrongPart, lowID, err)
	}

	// The rotation moves the new generation's settled row out and
	// truncates it; nothing is appended to any chain by the move.
	var entries, entriesAfter int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM drainer.audit`).Scan(&entries); err != nil {
		t.Fatal(err)
	}
	// The truncation waits for the transactions running when the
	// generation was emptied, those of other tests in this cluster too:
	// while one runs, the rotation says waiting and is asked again.
	var steps []string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		var step string
		if err := conn.QueryRow(ctx, `SELECT drainer.rotate_queue(1000000, 1000000, interval '1 millisecond', 100)`).Scan(&step); err != nil {
			t.Fatal(err)
		}
		if step == "idle" {
			break
		}
		if step != "waiting" {
			steps = append(steps, step)
			if step == "truncated" {
				break
			}
		}
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
