package store_test

import (
	"fmt"
	"testing"

	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
)

// TestAbortReadsItsRunOnly: aborting a run reads the run's own rows,
// however many rows of other runs are pending and whatever the planner's
// statistics say. With statistics taken while the queue was empty (a new
// generation, not analyzed since it filled), the cancellation was planned
// as a walk of every pending row, each joined to its intent: 2.9 s at
// 485,000 pending rows, paid by every failed forward row too, whose
// completion aborts its run.
func TestAbortReadsItsRunOnly(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `ANALYZE drainer.queue; ANALYZE drainer.intents`); err != nil {
		t.Fatal(err)
	}
	const others = 5000
	storetest.Enqueue(t, pool, "run-others", "t", others)
	storetest.Enqueue(t, pool, "run-small", "t", 3)

	tx := measuredTx(t, pool)
	if got := scalar[int32](t, tx, `SELECT drainer.abort_run('run-small', 'cost test')`); got != 3 {
		t.Fatalf("abort_run cancelled %d rows, want the run's 3", got)
	}
	read := scalar[int64](t, tx, `SELECT coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0)::bigint
	      FROM pg_stat_xact_user_tables
	     WHERE relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'drainer.queue'::regclass)
	        OR relid = 'drainer.intents'::regclass`)
	t.Logf("aborting a run of 3 rows beside %d pending rows read %d queue rows and intents", others, read)
	if read > 100 {
		t.Fatalf("aborting a run of 3 rows beside %d pending rows read %d queue rows and intents, want at most 100", others, read)
	}
}

// TestAbortedRunsReadTheirRunsOnly: what requeue reads of the aborted runs
// it may revive is their own rows, however many rows other runs hold. The
// test for a compensation among a run's rows was planned as one pass over
// every row of the outbox, hashed, for a batch of runs: 1.6–1.9 s a batch
// of 1,000 beside a million rows, so a bulk requeue's time grew with the
// table, not with what it requeued.
func TestAbortedRunsReadTheirRunsOnly(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	ctx := t.Context()
	st := store.MustNew(storetest.Schema)
	const runs, others = 300, 6000
	storetest.Enqueue(t, pool, "run-others", "t", others)
	var ids []string
	for i := range runs {
		id := fmt.Sprintf("run-aborted-%d", i)
		ids = append(ids, id)
		storetest.Enqueue(t, pool, id, "t", 1)
	}
	if _, err := pool.Exec(ctx, `UPDATE drainer.queue q SET status = 'failed', attempts = 1
	      FROM drainer.intents i WHERE i.seq = q.seq AND i.agent_run_id LIKE 'run-aborted-%'`); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := pool.Exec(ctx, `SELECT drainer.abort_run($1, 'cost test')`, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `ANALYZE drainer.queue; ANALYZE drainer.intents; ANALYZE drainer.runs`); err != nil {
		t.Fatal(err)
	}
	tx := measuredTx(t, pool)
	got, err := st.AbortedRuns(ctx, tx, ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != runs || len(got[0].Failed) != 1 || got[0].SagaStarted {
		t.Fatalf("AbortedRuns: %d runs (first %+v), want %d, each with its failed row and no saga started", len(got), got[0], runs)
	}
	read := scalar[int64](t, tx, `SELECT coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0)::bigint
	      FROM pg_stat_xact_user_tables
	     WHERE relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'drainer.queue'::regclass)
	        OR relid = 'drainer.intents'::regclass`)
	t.Logf("reading %d aborted runs of one row each beside %d rows read %d queue rows and intents", runs, others, read)
	if read > 10*runs {
		t.Fatalf("reading %d aborted runs of one row each beside %d rows read %d queue rows and intents, want at most %d", runs, others, read, 10*runs)
	}
}
