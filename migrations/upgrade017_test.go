package migrations

import (
	"context"
	_ "embed"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// The claim and completion statements release 16's daemon sends: a replica
// of the old binary keeps sending them while `drainer migrate` of this
// release moves the outbox into intents and queue.
var (
	//go:embed testdata/release16/claim.sql
	release16Claim string
	//go:embed testdata/release16/complete.sql
	release16Complete string
)

// TestUpgradeTo017KeepsRowsInFlight upgrades a schema at version 16 that
// holds rows pending, in flight (leased by a release-16 replica), parked, an
// open saga with its compensation queued, a pruned key and audit chains, and
// checks that nothing is lost or changed, that the old replica's completion
// of its leased row lands through the outbox view (fenced by its lease, with
// the audit entry of the answer), that its claims keep working, that the
// saga goes on, and that every audit chain still verifies.
func TestUpgradeTo017KeepsRowsInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := openOldSchema(t, 16, "release 16", release16Claim)
	conn, exec, keyOf, oldClaim := o.conn, o.exec, o.keyOf, o.claim

	// Release 16: the row in flight is claimed first (it is due first).
	flight := o.seedRowsInFlight()
	flightSeq, flightToken := flight.Seq, flight.Token
	before := o.snapshot()
	if len(before) != 5 {
		t.Fatalf("release 16 outbox holds %d rows, want 5: %v", len(before), before)
	}

	if _, err := Migrate(ctx, conn, "drainer", nil); err != nil {
		t.Fatal(err)
	}

	o.sameRows(before, o.snapshot())

	// The old replica finishes its call and writes the answer: through the
	// view, fenced by its lease, audited with the provider's status.
	exec(`BEGIN`)
	exec(`SELECT set_config('drainer.answer', 'on', true)`)
	tag, err := conn.Exec(ctx, release16Complete, []int64{flightSeq}, []pgtype.UUID{flightToken}, []string{"succeeded"},
		[]int32{0}, []int64{-1}, []*string{nil}, []*string{nil}, []string{`{"id": "ch_9"}`}, []int32{201}, []bool{false}, []int32{1})
	if err != nil {
		t.Fatalf("release 16 completion after the upgrade: %v", err)
	}
	exec(`COMMIT`)
	if tag.RowsAffected() != 1 {
		t.Fatalf("release 16 completion wrote %d rows, want its 1 leased row", tag.RowsAffected())
	}
	// A second write with a stale lease is fenced off.
	stale := pgtype.UUID{Bytes: [16]byte{1}, Valid: true}
	if tag, err := conn.Exec(ctx, release16Complete, []int64{flightSeq}, []pgtype.UUID{stale}, []string{"failed"},
		[]int32{0}, []int64{-1}, []*string{nil}, []*string{nil}, []*string{nil}, []int32{500}, []bool{false}, []int32{1}); err != nil || tag.RowsAffected() != 0 {
		t.Fatalf("a completion under a stale lease wrote %d rows (%v), want 0", tag.RowsAffected(), err)
	}
	var status, response string
	var answer *int32
	if err := conn.QueryRow(ctx, `SELECT o.status, o.response::text,
	        (SELECT a.response_status FROM drainer.audit a WHERE a.key = o.key ORDER BY a.id DESC LIMIT 1)
	        FROM drainer.outbox o WHERE o.seq = $1`, flightSeq).Scan(&status, &response, &answer); err != nil {
		t.Fatal(err)
	}
	if status != "succeeded" || response != `{"id": "ch_9"}` || answer == nil || *answer != 201 {
		t.Fatalf("the leased row after release 16's completion: %s %s, audited answer %v", status, response, answer)
	}

	// The old replica's claims go on through the view: the waiting row and
	// the saga's compensation, oldest first.
	got := oldClaim(10)
	compKey := keyOf("r2", "a", "refund")
	kinds := map[string]string{}
	for _, c := range got {
		kinds[c.Key] = c.Kind
	}
	if len(got) != 2 || kinds[keyOf("r1", "waiting", "charge")] != "forward" || kinds[compKey] != "compensation" {
		t.Fatalf("release 16 claim after the upgrade leased %+v; want the waiting row and the compensation", got)
	}
	var queueStatus string
	if err := conn.QueryRow(ctx, `SELECT q.status FROM drainer.queue q JOIN drainer.intents i ON i.seq = q.seq WHERE i.key = $1`, compKey).Scan(&queueStatus); err != nil || queueStatus != "in_flight" {
		t.Fatalf("the compensation's queue row: %q, %v; want in_flight", queueStatus, err)
	}
	// Its compensation succeeds: the forward row becomes compensated.
	for _, c := range got {
		if c.Key != compKey {
			continue
		}
		var seq int64
		if err := conn.QueryRow(ctx, `SELECT seq FROM drainer.outbox WHERE key = $1`, c.Key).Scan(&seq); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, release16Complete, []int64{seq}, []pgtype.UUID{c.Token}, []string{"succeeded"},
			[]int32{0}, []int64{-1}, []*string{nil}, []*string{nil}, []string{`{}`}, []int32{200}, []bool{false}, []int32{1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := conn.QueryRow(ctx, `SELECT status FROM drainer.outbox WHERE key = $1`, keyOf("r2", "a", "charge")).Scan(&status); err != nil || status != "compensated" {
		t.Fatalf("the forward row of the saga after its compensation succeeded: %q, %v", status, err)
	}

	// The parked row waits for a human; the pruned key is still known.
	if err := conn.QueryRow(ctx, `SELECT status FROM drainer.outbox WHERE key = $1`, keyOf("r1", "parked", "ship")).Scan(&status); err != nil || status != "outcome_unknown" {
		t.Fatalf("the parked row after the upgrade: %q, %v", status, err)
	}
	var created bool
	if err := conn.QueryRow(ctx, `SELECT created FROM drainer.enqueue('r3', 'old', 'charge', '', '{"amount": 4.0}')`).Scan(&created); err != nil || created {
		t.Fatalf("re-enqueue of a key pruned before the upgrade: created %v (%v), want false", created, err)
	}
	// A new enqueue lands in both tables.
	if err := conn.QueryRow(ctx, `SELECT created FROM drainer.enqueue('r4', 'new', 'charge', '', '{"amount": 5}')`).Scan(&created); err != nil || !created {
		t.Fatalf("enqueue after the upgrade: created %v (%v)", created, err)
	}
	var queued int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM drainer.queue q JOIN drainer.intents i ON i.seq = q.seq
	        WHERE i.key = $1 AND q.status = 'pending'`, keyOf("r4", "new", "charge")).Scan(&queued); err != nil || queued != 1 {
		t.Fatalf("the new intent's queue row: %d (%v)", queued, err)
	}

	var broken int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM drainer.audit_verify(100)`).Scan(&broken); err != nil || broken != 0 {
		t.Fatalf("audit_verify after the upgrade: %d problems (%v)", broken, err)
	}
	// Each chain goes on across the move: the in-flight row's has its
	// creation before the upgrade and its answer after.
	var entries int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM drainer.audit a JOIN drainer.outbox o ON o.key = a.key WHERE o.seq = $1`, flightSeq).Scan(&entries); err != nil || entries != 2 {
		t.Fatalf("the in-flight row's audit chain: %d entries (%v), want its creation and its answer", entries, err)
	}
}
