package store_test

import (
	"context"
	_ "embed"
	"testing"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// release18Complete is release 18's completion, which wrote no audit entry
// itself (its statement trigger did).
//
//go:embed testdata/release18/complete.sql
var release18Complete string

// TestAuditAcrossTheUpgradeTo019: rows written before migration 019 carry
// no chain head, and a replica of release 18 keeps completing with its own
// statement while this release's replicas run. Its completion is recorded
// (by the row trigger, with the answer) and moves the head; this release's
// completion of a row without a head links to the chain's last entry; every
// chain verifies, and each row ends where its chain ends.
func TestAuditAcrossTheUpgradeTo019(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := context.Background()
	keys := storetest.Enqueue(t, pool, "run", "t", 2)
	// As written before 019: no head.
	if _, err := pool.Exec(ctx, `UPDATE drainer.queue SET audit_head = NULL`); err != nil {
		t.Fatal(err)
	}
	rows, err := st.Claim(ctx, pool, store.Claim{Limit: 2, Lease: time.Minute, Replica: "r"})
	if err != nil || len(rows) != 2 {
		t.Fatalf("claim: %d rows, %v", len(rows), err)
	}
	byKey := map[string]store.ClaimedRow{}
	for _, r := range rows {
		byKey[r.Key] = r
	}

	// The release-18 replica completes its row.
	old := byKey[keys[0]]
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('drainer.answer', 'on', true)`); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, release18Complete, []int64{old.Seq}, []pgtype.UUID{old.LeaseToken}, []string{"succeeded"},
			[]int32{0}, []int64{-1}, []*string{nil}, []*string{nil}, []string{`{"id": "ch_1"}`}, []int32{201}, []bool{false}, []int32{int32(old.Attempts)})
		if err == nil && tag.RowsAffected() != 1 {
			t.Errorf("release 18 completion wrote %d rows, want 1", tag.RowsAffected())
		}
		return err
	})
	if err != nil {
		t.Fatalf("release 18 completion: %v", err)
	}
	// This release completes the other, whose head is unknown.
	cur := byKey[keys[1]]
	if _, err := st.Complete(ctx, pool, []store.Completion{{Seq: cur.Seq, Token: cur.LeaseToken, Attempts: cur.Attempts,
		Status: outbox.StatusSucceeded, ResponseStatus: 200}}); err != nil {
		t.Fatal(err)
	}

	for i, k := range keys {
		trail, err := st.AuditTrail(ctx, pool, k)
		if err != nil {
			t.Fatal(err)
		}
		last := trail[len(trail)-1]
		want := []int{201, 200}[i]
		if len(trail) != 2 || outbox.Status(deref(last.ToStatus)) != outbox.StatusSucceeded || last.ResponseStatus == nil || *last.ResponseStatus != want {
			t.Fatalf("row %d's chain: %d entries, last %s answered %v; want enqueued then succeeded answered %d", i, len(trail), deref(last.ToStatus), last.ResponseStatus, want)
		}
	}
	var heads int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM drainer.queue q JOIN drainer.intents i USING (seq)
	    WHERE q.audit_head = (SELECT a.hash FROM drainer.audit a WHERE a.key = i.key ORDER BY a.id DESC LIMIT 1)`).Scan(&heads); err != nil || heads != 2 {
		t.Fatalf("rows carrying their chain's last hash: %d (%v), want 2", heads, err)
	}
	if broken, err := st.VerifyAudit(ctx, pool, 10); err != nil || len(broken) != 0 {
		t.Fatalf("audit verify: %v %v", broken, err)
	}
}
