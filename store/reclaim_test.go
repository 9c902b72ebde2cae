package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// outboxEntriesRead returns how many tuples this connection's session has
// read from the outbox table (sequential scans) and from all its indexes.
func outboxEntriesRead(t *testing.T, conn *pgxpool.Conn) int64 {
	t.Helper()
	return statRead(t, conn, `SELECT sum(pg_stat_get_tuples_returned(p.relid)
	        + (SELECT coalesce(sum(pg_stat_get_tuples_returned(x.indexrelid)), 0) FROM pg_index x WHERE x.indrelid = p.relid))::bigint
	        FROM pg_partition_tree('drainer.queue') p WHERE p.isleaf`) // its generations' tables and indexes
}

// TestReclaimSkipsSettledLeases: while a transaction holds back vacuum,
// every row that was in flight leaves a dead index entry of its lease. The
// reclaim looks for expired leases by expiry, so it does not read the
// entries of leases that were settled before they expired (a fast drain
// leaves thousands), and still finds the one lease that did expire.
func TestReclaimSkipsSettledLeases(t *testing.T) {
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := context.Background()
	storetest.Enqueue(t, pool, "run", "t", 20000)
	if _, err := pool.Exec(ctx, "ANALYZE drainer.queue"); err != nil {
		t.Fatal(err)
	}
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
	// 2,000 rows claimed and settled; one more claimed with a lease that
	// has expired by the time the reclaim looks.
	for range 10 {
		rows, err := st.Claim(ctx, conn, store.Claim{Limit: 200, Lease: time.Minute, Replica: "r"})
		if err != nil || len(rows) != 200 {
			t.Fatalf("claim: %d rows, %v", len(rows), err)
		}
		cs := make([]store.Completion, len(rows))
		for i, r := range rows {
			cs[i] = store.Completion{Seq: r.Seq, Token: r.LeaseToken, Status: outbox.StatusSucceeded}
		}
		if done, err := st.Complete(ctx, conn, cs); err != nil || len(done.Lost) != 0 {
			t.Fatalf("complete: %v, lost %v", err, done.Lost)
		}
	}
	lost, err := st.Claim(ctx, conn, store.Claim{Limit: 1, Lease: time.Millisecond, Replica: "dead"})
	if err != nil || len(lost) != 1 {
		t.Fatalf("claim: %d rows, %v", len(lost), err)
	}
	time.Sleep(10 * time.Millisecond)

	before := outboxEntriesRead(t, conn)
	n, err := st.Reclaim(ctx, conn, store.ReclaimPolicy{})
	if err != nil || n != 1 {
		t.Fatalf("reclaim took back %d rows (%v), want the 1 whose lease expired", n, err)
	}
	if read := outboxEntriesRead(t, conn) - before; read > 100 {
		t.Fatalf("reclaim read %d outbox tuples and index entries: it reads the ~2,000 settled leases", read)
	}
	if got := storetest.Get(t, pool, lost[0].Key).Status; got != outbox.StatusPending {
		t.Fatalf("reclaimed row is %s, want pending", got)
	}
}
