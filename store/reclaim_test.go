package store_test

import (
	"context"
	"strings"
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
	t.Parallel()
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

// TestReclaimIsHeldOnlyByWhatIsKnown: a reclaimed row is due once its lease
// has expired, held further only by its route's reclaim_hold and by the
// longest Retry-After its tool was answered within the route's
// max_retry_after (recorded by the completion that wrote that answer); a
// mark older than the window holds nothing, and the marks no reclaim can
// read are dropped.
func TestReclaimIsHeldOnlyByWhatIsKnown(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := t.Context()
	limited := storetest.Enqueue(t, pool, "run-limited", "limited", 3) // the provider rate-limits this tool
	held := storetest.Enqueue(t, pool, "run-held", "held", 1)          // its route has reclaim_hold 40s
	free := storetest.Enqueue(t, pool, "run-free", "free", 1)          // nothing known: due at once
	stale := storetest.Enqueue(t, pool, "run-stale", "stale", 1)       // a Retry-After outside the window
	rows, err := st.Claim(ctx, pool, store.Claim{Limit: 10, Lease: 200 * time.Millisecond, Replica: "a", Durable: true})
	if err != nil || len(rows) != 6 {
		t.Fatalf("claim: %d rows, %v", len(rows), err)
	}
	// One row of the rate-limited tool is answered 429 Retry-After 90s.
	var answered store.ClaimedRow
	for _, r := range rows {
		if r.Key == limited[0] {
			answered = r
		}
	}
	msg := "attempt 1 of 5: http 429"
	if done, err := st.Complete(ctx, pool, []store.Completion{{Seq: answered.Seq, Token: answered.LeaseToken, Attempts: answered.Attempts,
		Gen: answered.Gen, Status: outbox.StatusPending, Delay: 90 * time.Second, Floor: true, LastError: &msg, ResponseStatus: 429,
		Tool: "limited", RetryAfter: 90 * time.Second}}); err != nil || len(done.Lost) != 0 {
		t.Fatalf("complete the answered row: lost %v, %v", done.Lost, err)
	}
	// Two hours ago, the provider asked the stale tool for an hour.
	if _, err := pool.Exec(ctx, `INSERT INTO `+storetest.Schema+`.retry_after_marks (tool_name, bucket, longest_ms)
		VALUES ('stale', date_trunc('minute', now() - interval '2 hours'), 3600000)`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the other leases expire
	policy := store.ReclaimPolicy{
		Hold:        map[string]time.Duration{"held": 40 * time.Second},
		Window:      map[string]time.Duration{"limited": time.Hour, "held": time.Hour, "free": time.Hour, "stale": time.Hour},
		OtherWindow: time.Hour,
	}
	if n, err := st.Reclaim(ctx, pool, policy); err != nil || n != 5 {
		t.Fatalf("reclaim: %d rows, %v; want the 5 unanswered", n, err)
	}
	for _, k := range limited[1:] {
		r := storetest.Get(t, pool, k)
		if r.Status != outbox.StatusPending || r.Floor < 80*time.Second || r.Floor > 91*time.Second {
			t.Errorf("reclaimed row of the rate-limited tool: %s, floor in %s; want held by the tool's recent Retry-After (90s from its lease expiry)", r.Status, r.Floor)
		}
		if r.LastError == nil || !strings.Contains(*r.LastError, "Retry-After") {
			t.Errorf("reclaimed row's last_error %v does not say what holds it", r.LastError)
		}
	}
	if r := storetest.Get(t, pool, held[0]); r.Floor < 30*time.Second || r.Floor > 41*time.Second {
		t.Errorf("reclaimed row of a route with reclaim_hold 40s: floor in %s; want about 40s", r.Floor)
	}
	for _, k := range append(free, stale...) {
		if r := storetest.Get(t, pool, k); r.Status != outbox.StatusPending || r.Floor > 0 || r.DueIn > time.Second {
			t.Errorf("reclaimed row with nothing known against it: %s, due in %s, floor in %s; want due at once", r.Status, r.DueIn, r.Floor)
		}
	}
	again, err := st.Claim(ctx, pool, store.Claim{Limit: 10, Lease: time.Minute, Replica: "b", Durable: true})
	if err != nil || len(again) != 2 {
		t.Fatalf("claim after the reclaim: %d rows, %v; want the 2 rows nothing holds", len(again), err)
	}
	if n, err := st.PruneRetryAfterMarks(ctx, pool, time.Hour); err != nil || n != 1 {
		t.Fatalf("prune marks older than an hour: %d, %v; want the stale one", n, err)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+storetest.Schema+`.retry_after_marks WHERE tool_name = 'limited'`).Scan(&left); err != nil || left != 1 {
		t.Fatalf("recent marks left: %d, %v; want the rate-limited tool's", left, err)
	}
}

// TestReclaimNamesReplicaAndReason: a reclaim counts the rows it takes back
// by the replica whose lease expired, and each row's audit entry says why
// it left in_flight.
func TestReclaimNamesReplicaAndReason(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := t.Context()
	keys := storetest.Enqueue(t, pool, "run-reclaim-why", "t", 3)
	if rows, err := st.Claim(ctx, pool, store.Claim{Limit: 2, Lease: 10 * time.Millisecond, Replica: "host-a:1", Durable: true}); err != nil || len(rows) != 2 {
		t.Fatalf("claim a: %d rows, %v", len(rows), err)
	}
	if rows, err := st.Claim(ctx, pool, store.Claim{Limit: 1, Lease: 10 * time.Millisecond, Replica: "host-b:2", Durable: true}); err != nil || len(rows) != 1 {
		t.Fatalf("claim b: %d rows, %v", len(rows), err)
	}
	time.Sleep(50 * time.Millisecond)
	from, err := st.ReclaimFrom(ctx, pool, store.ReclaimPolicy{})
	if err != nil || len(from) != 2 || from["host-a:1"] != 2 || from["host-b:2"] != 1 {
		t.Fatalf("reclaimed %v, %v; want 2 rows of host-a:1 and 1 of host-b:2", from, err)
	}
	for _, key := range keys {
		var reason string
		if err := pool.QueryRow(ctx, `SELECT coalesce(reason, '') FROM `+storetest.Schema+`.audit
		     WHERE key = $1 AND from_status = 'in_flight' ORDER BY at DESC, id DESC LIMIT 1`, key).Scan(&reason); err != nil {
			t.Fatalf("audit entry of %s: %v", key, err)
		}
		if !strings.HasPrefix(reason, "reclaimed: the lease expired during the attempt") {
			t.Fatalf("audit entry of the reclaimed row %s gives the reason %q", key, reason)
		}
	}
}

// TestReclaimLeavesTheRowsWhoseAnswerItHolds: the reclaiming replica does
// not take back a row whose answer it holds (ReclaimPolicy.Held), though
// its lease expired: the answer lands on it instead of a second attempt.
// The others are reclaimed as ever.
func TestReclaimLeavesTheRowsWhoseAnswerItHolds(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := t.Context()
	keys := storetest.Enqueue(t, pool, "run-held", "t", 2)
	rows, err := st.Claim(ctx, pool, store.Claim{Limit: 2, Lease: 10 * time.Millisecond, Replica: "a", Durable: true})
	if err != nil || len(rows) != 2 {
		t.Fatalf("claim: %d rows, %v", len(rows), err)
	}
	time.Sleep(50 * time.Millisecond) // both leases expire
	held := rows[0]
	n, err := st.Reclaim(ctx, pool, store.ReclaimPolicy{Held: []int64{held.Seq}})
	if err != nil || n != 1 {
		t.Fatalf("reclaim: %d rows, %v; want the one whose answer is not held", n, err)
	}
	for _, k := range keys {
		want := outbox.StatusPending
		if k == held.Key {
			want = outbox.StatusInFlight
		}
		if r := storetest.Get(t, pool, k); r.Status != want {
			t.Errorf("row %s is %s after the reclaim, want %s", k, r.Status, want)
		}
	}
}
