package store

import (
	"context"
	"testing"
	"time"
)

// TestReclaimReadsOneBatch: a reclaim pass reads the rows it takes back,
// oldest lease first, and stops there, however many leases expired (a
// fleet of replicas lost at once leaves as many as their workers): each
// generation's lease index is walked in step. Before, every expired row
// was read and sorted for each batch of ReclaimBatch (10,000 expired: 31,000
// rows across the plan, against 12,000 now). With the statistics the rows
// had while pending. The bound counts every node's rows: about a dozen per
// row taken back (its update, its Retry-After look-ups).
func TestReclaimReadsOneBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, s := migratedConn(t)
	const n = 10 * ReclaimBatch
	if _, err := conn.Exec(ctx, `SELECT count(*) FROM drainer.enqueue_batch(
	        ARRAY(SELECT 'run-reclaim' FROM generate_series(1, $1)), ARRAY(SELECT 'step-' || g FROM generate_series(1, $1) g),
	        ARRAY(SELECT 't' FROM generate_series(1, $1)), ARRAY(SELECT '' FROM generate_series(1, $1)),
	        ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, $1) g))`, n); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `ANALYZE drainer.queue`); err != nil {
		t.Fatal(err)
	}
	claimed, err := s.Claim(ctx, conn, Claim{Limit: n, Lease: time.Minute, Replica: "lost", Durable: true})
	if err != nil || len(claimed) != n {
		t.Fatalf("claim: %d rows, %v", len(claimed), err)
	}
	if _, err := conn.Exec(ctx, `UPDATE drainer.queue SET lease_expires_at = now() - interval '1 minute' - seq * interval '1 millisecond'`); err != nil {
		t.Fatal(err)
	}

	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, reclaimSettings); err != nil {
		t.Fatal(err)
	}
	var plan []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+s.sql(reclaimSQL),
		[]string{}, ReclaimBatch, []string{}, []int64{}, []*int64{}, int64(0), []int64{1, 2, 3}).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var reclaimed int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM drainer.queue WHERE status = 'pending'`).Scan(&reclaimed); err != nil || reclaimed != ReclaimBatch {
		t.Fatalf("the pass took back %d rows, %v; want %d", reclaimed, err, ReclaimBatch)
	}
	work := PlanWork(t, plan)
	t.Logf("reclaiming %d of %d expired leases: %.0f rows across the plan", ReclaimBatch, n, work)
	if work > 15*ReclaimBatch {
		t.Fatalf("reclaiming %d of %d expired leases returned %.0f rows across its plan, want at most %d (the batch, not every expired lease)",
			ReclaimBatch, n, work, 15*ReclaimBatch)
	}
}
