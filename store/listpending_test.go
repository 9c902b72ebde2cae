package store_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// queueRowsRead is what the transaction of tx has read of the queue's
// generations and of the intents so far: rows read by a pass over a table,
// and rows fetched through an index.
func queueRowsRead(t *testing.T, tx pgx.Tx) int64 {
	t.Helper()
	return scalar[int64](t, tx, `SELECT coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0)::bigint
	      FROM pg_stat_xact_user_tables
	     WHERE relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'drainer.queue'::regclass)
	        OR relid = 'drainer.intents'::regclass`)
}

// settleWithStaleStatistics analyzes the queue while every row is
// pending, then settles the rows of run and vacuums: the state a drained
// backlog leaves until the generation is analyzed again (its dead row
// versions gone, its statistics still saying every row is pending).
func settleWithStaleStatistics(t *testing.T, pool *pgxpool.Pool, run string) {
	t.Helper()
	for _, sql := range []string{
		`ANALYZE drainer.queue`, `ANALYZE drainer.intents`,
		`UPDATE drainer.queue q SET status = 'succeeded', attempts = 1, updated_at = now()
		   FROM drainer.intents i WHERE i.seq = q.seq AND i.agent_run_id = '` + run + `'`,
		`VACUUM drainer.queue`,
	} {
		if _, err := pool.Exec(t.Context(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

// TestListPendingReadsPendingRowsOnly: a page of pending rows reads the
// pending rows, and a walk of a few times the page past the cursor, not the
// settled rows before them, with the statistics a drained backlog leaves
// (taken while every row was pending). Before, the page was planned as a
// walk of every generation in seq order, each row's intent joined, and
// read every settled row before the first pending one: 0.3 s at 10^6
// rows, 100 of them pending. A backlog's page still reads about its walk.
func TestListPendingReadsPendingRowsOnly(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	const settled, pending, limit = 20000, 30, 11
	storetest.Enqueue(t, pool, "run-settled", "t", settled)
	keys := storetest.Enqueue(t, pool, "run-open", "t", pending)
	settleWithStaleStatistics(t, pool, "run-settled")
	pendingOnly := store.Filter{Status: outbox.StatusPending}

	tx := measuredTx(t, pool)
	page, err := st.ListRowSummaries(t.Context(), tx, pendingOnly, 0, limit)
	if err != nil {
		t.Fatal(err)
	}
	if got := summaryKeys(page); !slices.Equal(got, keys[:limit]) {
		t.Fatalf("first page: %v, want the first %d pending rows %v", got, limit, keys[:limit])
	}
	read := queueRowsRead(t, tx)
	t.Logf("a page of %d pending rows beside %d settled ones read %d queue rows and intents", limit, settled, read)
	if read > 1000 {
		t.Fatalf("a page of %d pending rows beside %d settled ones read %d queue rows and intents, want at most 1000", limit, settled, read)
	}

	// The rows whole (drainer list --output json) are read the same way.
	tx = measuredTx(t, pool)
	var whole []string
	err = st.EachRow(t.Context(), tx, pendingOnly, page[limit-1].Seq, limit, func(r *store.Row) error {
		whole = append(whole, r.Key)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := keys[limit : 2*limit]; !slices.Equal(whole, want) {
		t.Fatalf("second page, whole: %v, want %v", whole, want)
	}
	if read := queueRowsRead(t, tx); read > 1000 {
		t.Fatalf("a page of %d whole pending rows beside %d settled ones read %d queue rows and intents, want at most 1000", limit, settled, read)
	}

	// Once the rotation moved the settled rows to queue_settled, a backlog
	// queued after the pending rows: its pages read about their walks.
	rotateUntilQuiet(t, st, pool, store.Rotation{FlipRows: 1 << 40, IdleRows: 1 << 30, FlipAge: time.Millisecond, Chunk: 100_000})
	if n := scalar[int64](t, pool, `SELECT count(*) FROM drainer.queue WHERE gen = 0`); n != settled {
		t.Fatalf("%d rows in queue_settled after the rotation, want %d", n, settled)
	}
	backlog := storetest.Enqueue(t, pool, "run-backlog", "t", settled)
	tx = measuredTx(t, pool)
	page, err = st.ListRowSummaries(t.Context(), tx, pendingOnly, 0, limit)
	if err != nil {
		t.Fatal(err)
	}
	if got := summaryKeys(page); !slices.Equal(got, keys[:limit]) {
		t.Fatalf("first page beside a backlog: %v, want %v", got, keys[:limit])
	}
	last := scalar[int64](t, pool, `SELECT max(seq) FROM drainer.outbox WHERE agent_run_id = 'run-open'`)
	page, err = st.ListRowSummaries(t.Context(), tx, pendingOnly, last, limit)
	if err != nil {
		t.Fatal(err)
	}
	if got := summaryKeys(page); !slices.Equal(got, backlog[:limit]) {
		t.Fatalf("a page of the backlog: %v, want %v", got, backlog[:limit])
	}
	read = queueRowsRead(t, tx)
	t.Logf("two pages of %d pending rows beside %d settled ones and a backlog of %d read %d queue rows and intents", limit, settled, settled, read)
	if read > 1000 {
		t.Fatalf("two pages of %d pending rows beside %d settled ones and a backlog of %d read %d queue rows and intents, want at most 1000",
			limit, settled, settled, read)
	}
}

func summaryKeys(rows []store.RowSummary) []string {
	keys := []string{}
	for _, r := range rows {
		keys = append(keys, r.Key)
	}
	return keys
}

// TestListPendingPagesAsBefore: a list of pending rows, read either way
// (from its walk, or through the pending index), pages as the outbox does
// in seq order: every pending row once, in seq order, each page starting
// past the last one's seq, also for the rows a requeue made pending again
// in queue_settled, and with the conditions on the queue's columns.
func TestListPendingPagesAsBefore(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	ctx := t.Context()
	st := store.MustNew(storetest.Schema)
	var ins []store.Intent
	for i := range 3000 {
		ins = append(ins, store.Intent{AgentRunID: "run-pages", StepID: fmt.Sprint("s", i),
			ToolName: []string{"t-a", "t-b", "t-c"}[i%3], BusinessScope: fmt.Sprint("c", i%4), Payload: []byte(`{}`)})
	}
	storetest.EnqueueIntents(t, pool, ins)
	// Pending, from the first row: one in 5 (the walk holds a page), one
	// in 97 (the pending index does), then a run of 200; the others settle
	// and move to queue_settled, where one in 89 is requeued. Half of the
	// pending rows last changed 3 hours ago.
	if _, err := pool.Exec(ctx, `UPDATE drainer.queue SET status = 'succeeded', attempts = 1, updated_at = now() - interval '2 hours'
	      WHERE (seq <= 1000 AND seq % 5 <> 0) OR (seq > 1000 AND seq <= 2800 AND seq % 97 <> 0)`); err != nil {
		t.Fatal(err)
	}
	rotateUntilQuiet(t, st, pool, store.Rotation{FlipRows: 1 << 40, IdleRows: 1 << 30, FlipAge: time.Millisecond, Chunk: 100_000})
	for _, sql := range []string{
		`UPDATE drainer.queue SET status = 'pending', next_attempt_at = now() WHERE gen = 0 AND seq % 89 = 0`,
		`UPDATE drainer.queue SET updated_at = now() - interval '3 hours' WHERE status = 'pending' AND seq % 2 = 0`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM drainer.queue WHERE gen = 0 AND status = 'pending'`); n == 0 {
		t.Fatal("no pending row in queue_settled")
	}
	if _, err := pool.Exec(ctx, `ANALYZE drainer.queue; ANALYZE drainer.intents`); err != nil {
		t.Fatal(err)
	}
	filters := []store.Filter{
		{Status: outbox.StatusPending},
		{Status: outbox.StatusPending, Tool: "t-b"},
		{Status: outbox.StatusPending, Tool: "t-c", OlderThan: time.Hour},
		{Status: outbox.StatusPending, Scope: "c1"},
	}
	for _, f := range filters {
		want := referenceKeys(t, pool, f)
		for _, limit := range []int{1, 7, 50, 400} {
			var got []string
			var after int64
			for range len(want) + 2 {
				page, err := st.ListRowSummaries(ctx, pool, f, after, limit)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, summaryKeys(page)...)
				if len(page) < limit {
					break
				}
				after = page[len(page)-1].Seq
			}
			if !slices.Equal(got, want) {
				t.Errorf("filter %+v, pages of %d: %d rows, want %d (first difference at %d)", f, limit, len(got), len(want), firstDiff(got, want))
			}
		}
	}
}

// referenceKeys lists the keys of the outbox rows matching f's status,
// tool, age and scope in seq order, as a plain statement on the outbox.
func referenceKeys(t *testing.T, pool *pgxpool.Pool, f store.Filter) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT key FROM drainer.outbox
	     WHERE status = $1 AND ($2 = '' OR tool_name = $2) AND updated_at < now() - $3 * interval '1 microsecond'
	       AND ($4 = '' OR business_scope = $4)
	     ORDER BY seq`, f.Status, f.Tool, f.OlderThan.Microseconds(), f.Scope)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 {
		t.Fatalf("no row matches %+v", f)
	}
	return keys
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
