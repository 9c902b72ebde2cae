package store_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/jackc/pgx/v5"
)

// TestOldestPendingByToolReadsItsToolsRows: drainer stats finds each
// tool's oldest due pending row by reading about one row a tool, not the
// queue, with the statistics a drained backlog leaves (taken while every
// row was pending and due), beside settled rows and beside a backlog of
// due rows; a tool with open rows but none due has the due rows read, and
// no settled one. Before, the rows were read by a pass over every
// generation: 0.26 s at 10^6 rows for 100 due ones.
func TestOldestPendingByToolReadsItsToolsRows(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	ctx := t.Context()
	st := store.MustNew(storetest.Schema)
	const settled = 20000
	storetest.Enqueue(t, pool, "run-settled", "t-settled", settled)
	var ins []store.Intent
	for i := range 30 {
		ins = append(ins, store.Intent{AgentRunID: "run-open", StepID: fmt.Sprint("s", i),
			ToolName: []string{"t-a", "t-b", "t-c"}[i%3], Payload: []byte(`{}`)})
	}
	storetest.EnqueueIntents(t, pool, ins)
	settleWithStaleStatistics(t, pool, "run-settled")
	// due from 10 minutes to 1 second ago, t-c's rows not yet
	if _, err := pool.Exec(ctx, `UPDATE drainer.queue SET next_attempt_at = CASE WHEN tool_name = 't-c'
	        THEN now() + interval '1 hour' ELSE now() - (seq % 600 + 1) * interval '1 second' END
	      WHERE status = 'pending'`); err != nil {
		t.Fatal(err)
	}

	check := func(what string, maxRead int64) {
		t.Helper()
		tx := measuredTx(t, pool)
		got, err := st.OldestPendingByTool(ctx, tx)
		if err != nil {
			t.Fatal(err)
		}
		read := queueRowsRead(t, tx)
		want := oldestPendingByTool(t, tx)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: oldest pending by tool %v, want %v", what, got, want)
		}
		t.Logf("%s: oldest pending of %d tools read %d queue rows", what, len(got), read)
		if read > maxRead {
			t.Fatalf("%s: oldest pending of %d tools read %d queue rows, want at most %d", what, len(got), read, maxRead)
		}
	}
	check(fmt.Sprintf("beside %d settled rows", settled), 100)

	// a backlog of due rows of t-a and t-b, queued interleaved
	ins = nil
	for i := range settled {
		ins = append(ins, store.Intent{AgentRunID: "run-backlog", StepID: fmt.Sprint("s", i),
			ToolName: []string{"t-a", "t-b", "t-d"}[i%3], Payload: []byte(`{}`)})
	}
	storetest.EnqueueIntents(t, pool, ins)
	if _, err := pool.Exec(ctx, `UPDATE drainer.queue q SET next_attempt_at = now() - interval '1 second'
	      FROM drainer.intents i WHERE i.seq = q.seq AND i.agent_run_id = 'run-backlog'`); err != nil {
		t.Fatal(err)
	}
	check(fmt.Sprintf("beside %d settled rows, t-c's not due, and a backlog of %d due rows", settled, settled), settled+100)

	// t-c due too: every tool with open rows is met early in the due order
	if _, err := pool.Exec(ctx, `UPDATE drainer.queue SET next_attempt_at = now() - interval '20 minutes' WHERE tool_name = 't-c'`); err != nil {
		t.Fatal(err)
	}
	check(fmt.Sprintf("beside %d settled rows and a backlog of %d due rows", settled, settled), 100)
}

// oldestPendingByTool is OldestPendingByTool as a plain aggregate over
// the queue, in the same transaction (the same now()).
func oldestPendingByTool(t *testing.T, tx pgx.Tx) []store.ToolAge {
	t.Helper()
	rows, err := tx.Query(t.Context(), `SELECT tool_name, extract(epoch FROM now() - min(next_attempt_at))::float8 AS age
	      FROM drainer.queue WHERE status = 'pending' AND next_attempt_at <= now()
	     GROUP BY tool_name ORDER BY tool_name`)
	if err != nil {
		t.Fatal(err)
	}
	ages, err := pgx.CollectRows(rows, pgx.RowToStructByName[store.ToolAge])
	if err != nil {
		t.Fatal(err)
	}
	return ages
}
