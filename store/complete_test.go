package store_test

import (
	"testing"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
)

// TestFencingRejectsLateCompletion: a worker whose lease expired and was
// reclaimed cannot overwrite the new owner's result.
func TestFencingRejectsLateCompletion(t *testing.T) {
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := t.Context()
	lateMsg := "late"
	keys := storetest.Enqueue(t, pool, "run-7", "t", 1)
	first, err := st.Claim(ctx, pool, store.Claim{Limit: 1, Lease: 10 * time.Millisecond, Replica: "a", Durable: true})
	if err != nil || len(first) != 1 {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if n, err := st.Reclaim(ctx, pool, nil); err != nil || n != 1 {
		t.Fatalf("reclaim: %d %v", n, err)
	}
	second, err := st.Claim(ctx, pool, store.Claim{Limit: 1, Lease: time.Minute, Replica: "b", Durable: true})
	if err != nil || len(second) != 1 {
		t.Fatal(err)
	}
	late := store.Completion{Seq: first[0].Seq, Token: first[0].LeaseToken, Status: outbox.StatusFailed, LastError: &lateMsg, KeepNext: true}
	done, err := st.Complete(ctx, pool, []store.Completion{late})
	if err != nil || len(done.Lost) != 1 || done.Lost[0] != first[0].Seq {
		t.Fatalf("late completion: lost %v err %v; want it rejected", done.Lost, err)
	}
	if r := storetest.Get(t, pool, keys[0]); r.Status != outbox.StatusInFlight || r.Attempts != 2 {
		t.Fatalf("row after late completion: %+v", r)
	}
	owner := store.Completion{Seq: second[0].Seq, Token: second[0].LeaseToken, Status: outbox.StatusSucceeded, Response: []byte(`{}`), KeepNext: true}
	if done, err := st.Complete(ctx, pool, []store.Completion{owner}); err != nil || len(done.Lost) != 0 {
		t.Fatalf("owner completion: lost %v err %v", done.Lost, err)
	}
	if r := storetest.Get(t, pool, keys[0]); r.Status != outbox.StatusSucceeded {
		t.Fatalf("row: %+v", r)
	}
}
