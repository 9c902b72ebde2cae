package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// statRead flushes this connection's session statistics and returns the
// counter query reads (PostgreSQL 15+).
func statRead(t *testing.T, conn *pgxpool.Conn, query string) int64 {
	t.Helper()
	ctx := context.Background()
	if _, err := conn.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := conn.QueryRow(ctx, query).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// tuplesRead returns how many outbox tuples this connection's session has
// read (sequential scans) and fetched (index scans): the queue's, which the claim scans.
func tuplesRead(t *testing.T, conn *pgxpool.Conn) int64 {
	t.Helper()
	return statRead(t, conn, `SELECT sum(pg_stat_get_tuples_returned(relid) + pg_stat_get_tuples_fetched(relid))::bigint
	        FROM pg_partition_tree('drainer.queue') WHERE isleaf`) // its generations'
}

// TestClaimStaysCheapAfterEmptyTablePlan guards the plan pitfall: a claim
// planned from stale statistics (the table was empty when last analyzed, or
// when the statement was first prepared: the claim's plan is made once per
// connection, store.claimPlanSettings) must not, once rows arrive, scan or
// sort every due row. The same connection claims from the empty table many
// times, in each of the claim's forms (plain; with ordered and excluded
// tools; with its own tool ordered, so each candidate row's check of its
// scope runs; from a position), then 20,000 due rows (each in a scope of
// its own) arrive without an ANALYZE, and a claim of 10 in each form must
// read only a handful of tuples.
func TestClaimStaysCheapAfterEmptyTablePlan(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	forms := map[string]store.Claim{
		"plain":             {Limit: 10, Lease: time.Minute, Replica: "r", Durable: true},
		"ordered, excluded": {Limit: 10, Lease: time.Minute, Replica: "r", Ordered: []string{"other"}, Excluded: []string{"paused"}},
		"its tool ordered":  {Limit: 10, Lease: time.Minute, Replica: "r", Ordered: []string{"t"}},
		"from a position":   {Limit: 10, Lease: time.Minute, Replica: "r", After: &store.Position{Due: time.Unix(0, 0), Seq: 0}},
		"bytes bounded":     {Limit: 10, Lease: time.Minute, Replica: "r", MaxBytes: 32 << 20},
	}
	for name, c := range forms {
		for range 12 {
			if rows, err := st.Claim(ctx, conn, c); err != nil || len(rows) != 0 {
				t.Fatalf("claim (%s) on empty table: %d %v", name, len(rows), err)
			}
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO drainer.outbox (key, agent_run_id, step_id, tool_name, business_scope, payload, payload_hash)
	      SELECT 'k' || g, 'run', 's' || g, 't', 'scope-' || g, '{}', '\x00' FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	for name, c := range forms {
		before := tuplesRead(t, conn)
		rows, err := st.Claim(ctx, conn, c)
		if err != nil || len(rows) != 10 {
			t.Fatalf("claim (%s): %d rows, %v", name, len(rows), err)
		}
		if read := tuplesRead(t, conn) - before; read > 200 {
			t.Fatalf("claiming 10 rows (%s) read %d of 20,000 tuples: the claim plan scans the backlog", name, read)
		}
	}
}

// indexEntriesRead returns how many entries of the due index this
// connection's session has read.
func indexEntriesRead(t *testing.T, conn *pgxpool.Conn) int64 {
	t.Helper()
	return statRead(t, conn, `SELECT sum(pg_stat_get_tuples_returned(relid))::bigint
	        FROM pg_partition_tree('drainer.queue_due_idx') WHERE isleaf`) // its generations'
}

// TestClaimFromPositionSkipsTheDeadPrefix: while a transaction holds back
// vacuum, every row claimed leaves a dead entry at the front of the due
// index. A claim from the start reads them all again; a claim from the last
// claimed position does not.
func TestClaimFromPositionSkipsTheDeadPrefix(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := context.Background()
	storetest.Enqueue(t, pool, "run", "t", 3000)
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	if _, err := holder.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, "SELECT count(*) FROM drainer.outbox"); err != nil { // takes the snapshot
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var last *store.Position
	for range 20 {
		rows, err := st.Claim(ctx, conn, store.Claim{Limit: 100, Lease: time.Minute, Replica: "r", After: last})
		if err != nil || len(rows) != 100 {
			t.Fatalf("claim: %d rows, %v", len(rows), err)
		}
		p := store.Position{Due: rows[len(rows)-1].Due, Seq: rows[len(rows)-1].Seq}
		for _, r := range rows {
			if q := (store.Position{Due: r.Due, Seq: r.Seq}); q.Later(p) {
				p = q
			}
		}
		last = &p
	}
	before := indexEntriesRead(t, conn)
	if rows, err := st.Claim(ctx, conn, store.Claim{Limit: 10, Lease: time.Minute, Replica: "r", After: last}); err != nil || len(rows) != 10 {
		t.Fatalf("claim from the position: %d rows, %v", len(rows), err)
	}
	fromMark := indexEntriesRead(t, conn) - before
	before = indexEntriesRead(t, conn)
	if rows, err := st.Claim(ctx, conn, store.Claim{Limit: 10, Lease: time.Minute, Replica: "r"}); err != nil || len(rows) != 10 {
		t.Fatalf("claim from the start: %d rows, %v", len(rows), err)
	}
	fromStart := indexEntriesRead(t, conn) - before
	if fromMark > 100 || fromStart < 2000 {
		t.Fatalf("index entries read: %d from the position, %d from the start; want the position to skip the ~2,000 dead entries", fromMark, fromStart)
	}
}
