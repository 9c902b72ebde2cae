package store

import (
	"context"
	"testing"
	"time"
)

// TestDeferReadsOneBatch: deferring a paused tool's rows reads about the
// batch it defers, however many rows the queue holds: its rows are
// updated by key. Before, the batch was hashed and every generation
// scanned whole to find its rows (11,000 queued rows, a batch of 500:
// the plan's rows summed to 37,000; now 4,000, the paused tool's rows
// looked at once and the batch's updated).
func TestDeferReadsOneBatch(t *testing.T) {
	t.Parallel()
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
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+s.sql(deferSQL), "paused", int64(60000), batch, DeferJitterFrom.Milliseconds()).Scan(&plan); err != nil {
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

// TestWakeGoesInBatches: a wake makes a tool's deferred rows due a batch
// (DeferBatch) a statement until none is left, and leaves alone the rows
// its not_before floor holds (it would otherwise find them in every batch
// and never end). Before, one statement woke them all: a million deferred
// rows outlived its timeout and were rolled back whole.
func TestWakeGoesInBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, s := migratedConn(t)
	n := DeferBatch*2 + 10
	if _, err := conn.Exec(ctx, `SELECT count(*) FROM drainer.enqueue_batch(
	        ARRAY(SELECT 'run' FROM generate_series(1, $1)), ARRAY(SELECT 'step-' || g FROM generate_series(1, $1) g),
	        ARRAY(SELECT 'paused' FROM generate_series(1, $1)), ARRAY(SELECT '' FROM generate_series(1, $1)),
	        ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, $1) g))`, n); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `UPDATE drainer.queue SET next_attempt_at = now() + interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `UPDATE drainer.queue SET not_before = now() + interval '10 minutes', next_attempt_at = now() + interval '10 minutes'
	      WHERE seq IN (SELECT seq FROM drainer.queue ORDER BY seq LIMIT 3)`); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := s.Wake(wctx, conn, []string{"paused"}); err != nil {
		t.Fatal(err)
	}
	var due, floored int
	if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE next_attempt_at <= now()),
	        count(*) FILTER (WHERE next_attempt_at = not_before AND not_before > now())
	      FROM drainer.queue`).Scan(&due, &floored); err != nil {
		t.Fatal(err)
	}
	if due != n-3 || floored != 3 {
		t.Fatalf("after the wake: %d of %d rows due, %d held at their floor; want %d and 3", due, n, floored, n-3)
	}
	var statements int
	if err := conn.QueryRow(ctx, `SELECT count(DISTINCT xmin::text) FROM drainer.queue WHERE next_attempt_at <= now()`).Scan(&statements); err != nil {
		t.Fatal(err)
	}
	if statements != 3 {
		t.Fatalf("the wake's %d rows were written by %d transactions, want 3 (batches of %d)", n-3, statements, DeferBatch)
	}
}
