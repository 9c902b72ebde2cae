package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
)

// TestEnqueueLeasedNotifiesNobodyAndLeasesOnce: while a daemon sleeps
// (its wake slot held), EnqueueLeased records its row and leases it in the
// same transaction (in flight, one attempt, a lease token, this replica),
// and sends no notification: the first one the listener gets is that of an
// ordinary enqueue committed after it (notifications arrive in commit
// order), which names its own row; WakeAll's notification follows, naming
// no position. The same tuple again is a replay and leases nothing; with
// other arguments it is refused (23505) and leases nothing; a row its
// scope's order holds is recorded, pending, and not leased.
func TestEnqueueLeasedNotifiesNobodyAndLeasesOnce(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := context.Background()
	listener := storetest.ListenWhileAsleep(t, pool, st, 10*time.Second)

	claim := store.Claim{Lease: time.Minute, Replica: "gw"}
	quiet := store.Intent{AgentRunID: "r", StepID: "quiet", ToolName: "t", Payload: []byte(`{}`)}
	e, row, err := st.EnqueueLeased(ctx, pool, quiet, claim)
	if err != nil || !e.Created || row == nil {
		t.Fatalf("leased enqueue: %+v, %+v, %v; want the row created and leased", e, row, err)
	}
	if row.Key != e.Key || row.Attempts != 1 || !row.LeaseToken.Valid || row.AgentRunID != "r" || row.StepID != "quiet" {
		t.Fatalf("leased %+v, want %s with its first attempt and a lease", row, e.Key)
	}
	var status, by string
	if err := pool.QueryRow(ctx, `SELECT status, leased_by FROM drainer.outbox WHERE key = $1`, e.Key).Scan(&status, &by); err != nil {
		t.Fatal(err)
	}
	if status != "in_flight" || by != "gw" {
		t.Fatalf("%s is %s, leased by %q; want in_flight, by gw", e.Key, status, by)
	}
	if again, row, err := st.EnqueueLeased(ctx, pool, quiet, claim); err != nil || again.Created || again.Key != e.Key || row != nil {
		t.Fatalf("the same tuple again: %+v, %+v, %v; want a replay of %s, nothing leased", again, row, err, e.Key)
	}
	other := quiet
	other.Payload = []byte(`{"a":1}`)
	if _, row, err := st.EnqueueLeased(ctx, pool, other, claim); err == nil || !strings.Contains(err.Error(), "23505") || row != nil {
		t.Fatalf("the same tuple with other arguments: %+v, %v; want 23505, nothing leased", row, err)
	}
	loud, err := st.Enqueue(ctx, pool, store.Intent{AgentRunID: "r", StepID: "loud", ToolName: "t", Payload: []byte(`{}`)})
	if err != nil || !loud.Created {
		t.Fatalf("enqueue: %+v, %v", loud, err)
	}
	var loudSeq string
	if err := pool.QueryRow(ctx, `SELECT seq::text FROM drainer.intents WHERE key = $1`, loud.Key).Scan(&loudSeq); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n, err := listener.Conn().WaitForNotification(wctx)
	if err != nil {
		t.Fatalf("no notification of the ordinary enqueue: %v", err)
	}
	if !strings.HasSuffix(n.Payload, ":"+loudSeq) {
		t.Fatalf("first notification %q, want the ordinary enqueue's (row %s): a leased enqueue notified", n.Payload, loudSeq)
	}
	if err := st.WakeAll(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if n, err := listener.Conn().WaitForNotification(wctx); err != nil || n.Payload != "" {
		t.Fatalf("WakeAll: %+v, %v; want a notification naming no position", n, err)
	}
	held := claim
	held.Ordered = []string{"o"}
	first := storetest.Enqueue(t, pool, "run-o", "o", 1)[0] // open: its scope's next row waits for it
	behind := store.Intent{AgentRunID: "run-o", StepID: "behind", ToolName: "o", Payload: []byte(`{}`)}
	if b, row, err := st.EnqueueLeased(ctx, pool, behind, held); err != nil || !b.Created || row != nil {
		t.Fatalf("a row behind %s of its scope: %+v, %+v, %v; want it recorded, not leased", first, b, row, err)
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM drainer.outbox WHERE step_id = 'behind' AND status = 'pending' AND attempts = 0`).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("the row recorded behind its scope: %d pending, %v", rows, err)
	}
}

// TestEnqueueLeasedBatchRecordsInOrderOrNothing: the requests of a batch
// are recorded and leased in order in one transaction, so a second
// request for a key the first recorded is a replay that leases nothing;
// a batch holding one request whose arguments conflict with a recorded
// call's records none of them.
func TestEnqueueLeasedBatchRecordsInOrderOrNothing(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := context.Background()
	claim := store.Claim{Lease: time.Minute, Replica: "gw"}
	a := store.Intent{AgentRunID: "rb", StepID: "a", ToolName: "t", Payload: []byte(`{}`)}
	b := store.Intent{AgentRunID: "rb", StepID: "b", ToolName: "t", Payload: []byte(`{"n":2}`)}
	got, err := st.EnqueueLeasedBatch(ctx, pool, []store.LeaseRequest{{In: a, Claim: claim}, {In: b, Claim: claim}, {In: a, Claim: claim}})
	if err != nil || len(got) != 3 {
		t.Fatalf("batch: %+v, %v; want three answers", got, err)
	}
	for i, want := range []bool{true, true, false} {
		if got[i].Enqueued.Created != want || (got[i].Row != nil) != want {
			t.Errorf("request %d: created %v, leased %v; want %v and %v", i, got[i].Enqueued.Created, got[i].Row != nil, want, want)
		}
	}
	if got[0].Enqueued.Key != got[2].Enqueued.Key || got[0].Row == nil || got[0].Row.Key != got[0].Enqueued.Key {
		t.Errorf("the replay answers %s, the first leased %+v; want both %s", got[2].Enqueued.Key, got[0].Row, got[0].Enqueued.Key)
	}

	c := store.Intent{AgentRunID: "rb", StepID: "c", ToolName: "t", Payload: []byte(`{}`)}
	conflict := b
	conflict.Payload = []byte(`{"n":3}`)
	if got, err := st.EnqueueLeasedBatch(ctx, pool, []store.LeaseRequest{{In: c, Claim: claim}, {In: conflict, Claim: claim}}); err == nil || !strings.Contains(err.Error(), "23505") {
		t.Fatalf("a batch with a conflicting request: %+v, %v; want 23505", got, err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM drainer.outbox WHERE agent_run_id = 'rb' AND step_id = 'c'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows of the rolled-back batch recorded (%v); want none", n, err)
	}
}
