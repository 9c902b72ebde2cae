package store_test

import (
	"testing"

	"github.com/drainer-io/drainer/store/storetest"
)

// TestSagaStepReadsTheRunOnce: one step of an aborted run's saga
// (advance_saga) reads each of the run's rows about once, at its first step
// and halfway through its compensations. Before, a step read the run six
// times over (one scan a check), and a saga of 2,000 compensations spent 84 s
// in its steps; each step still reads the whole run, so a saga of n
// compensations reads n² rows in all (docs/sagas.md).
func TestSagaStepReadsTheRunOnce(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	ctx := t.Context()
	const n, run = 300, "run-saga-cost"
	storetest.Enqueue(t, pool, run, "charge", n)
	if _, err := pool.Exec(ctx, `UPDATE drainer.queue SET status = 'succeeded', attempts = 1`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT drainer.abort_run($1, 'test')`, run); err != nil {
		t.Fatal(err)
	}
	step := func(when string) {
		t.Helper()
		tx := measuredTx(t, pool)
		if got := scalar[string](t, tx, `SELECT drainer.advance_saga($1, ARRAY['charge'], ARRAY['refund'])`, run); got != "compensating" {
			t.Fatalf("%s: advance_saga answered %q, want compensating", when, got)
		}
		// every row of the run (forward and compensation rows) is read
		// in intents and found in the queue: twice its rows, and a few
		// more for the row compensated
		read := scalar[int64](t, tx, `SELECT coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0)::bigint
		      FROM pg_stat_xact_user_tables
		     WHERE relid = 'drainer.intents'::regclass
		        OR relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'drainer.queue'::regclass)`)
		rows := scalar[int64](t, tx, `SELECT count(*) FROM drainer.intents WHERE agent_run_id = $1`, run)
		t.Logf("%s: a step over a run of %d rows read %d tuples of the queue and intents", when, rows, read)
		if read > 2*rows+20 {
			t.Fatalf("%s: a step over a run of %d rows read %d tuples of the queue and intents, want at most %d", when, rows, read, 2*rows+20)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	step("first step")
	// half of the compensations succeed, one step after each
	for range n / 2 {
		if _, err := pool.Exec(ctx, `UPDATE drainer.queue SET status = 'succeeded', attempts = 1
		    WHERE kind = 'compensation' AND status = 'pending'`); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `SELECT drainer.advance_saga($1, ARRAY['charge'], ARRAY['refund'])`, run); err != nil {
			t.Fatal(err)
		}
	}
	if got := scalar[int64](t, pool, `SELECT count(*) FROM drainer.outbox WHERE agent_run_id = $1 AND status = 'compensated'`, run); got != n/2 {
		t.Fatalf("%d forward rows compensated after %d steps, want %d", got, n/2, n/2)
	}
	if _, err := pool.Exec(ctx, `UPDATE drainer.queue SET status = 'succeeded', attempts = 1
	    WHERE kind = 'compensation' AND status = 'pending'`); err != nil {
		t.Fatal(err)
	}
	step("halfway")
}
