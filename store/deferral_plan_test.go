package store

import (
	"context"
	"testing"
)

// TestDeferReadsOneBatch: deferring a paused tool's rows reads about the
// batch it defers, however many rows the queue holds: its rows are
// updated by key. Before, the batch was hashed and every generation
// scanned whole to find its rows (11,000 queued rows, a batch of 500:
// the plan's rows summed to 37,000; now 4,000, the paused tool's rows
// looked at once and the batch's updated).
func TestDeferReadsOneBatch(t *testing.T) {
	ctx := context.Background()
	conn, s := migratedConn(t)
	for tool, n := range map[string]int{"busy": 10000, "paused": 1000} {
		if _, err := conn.Exec(ctx, `SELECT count(*) FROM drainer.enqueue_batch(
		        ARRAY(SELECT 'run-' || $2 FROM generate_series(1, $1)), ARRAY(SELECT 'step-' || g FROM generate_series(1, $1) g),
		        ARRAY(SELECT $2 FROM generate_series(1, $1)), ARRAY(SELECT '' FROM generate_series(1, $1)),
		        ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, $1) g))`, n, tool); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(ctx, `ANALYZE drainer.queue`); err != nil {
		t.Fatal(err)
	}
	const batch = 500
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var plan []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+s.sql(deferSQL), "paused", int64(60000), batch).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var deferred int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM drainer.queue WHERE next_attempt_at > now() + interval '30 s'`).Scan(&deferred); err != nil || deferred != batch {
		t.Fatalf("deferred %d rows, %v; want %d", deferred, err, batch)
	}
	work := PlanWork(t, plan)
	t.Logf("deferring %d of a paused tool's 1,000 rows among 11,000: %.0f rows across the plan", batch, work)
	if work > 10*batch {
		t.Fatalf("deferring %d rows returned %.0f rows across its plan, want at most %d (the batch, not the queue)", batch, work, 10*batch)
	}
}
