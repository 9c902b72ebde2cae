package store_test

import (
	"slices"
	"testing"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
)

// TestRequeueKeepsTheFloor: a requeued row is due at its not_before floor,
// not now, unless the operator clears the floor; and a row whose status is
// no longer the one read is not written.
func TestRequeueKeepsTheFloor(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := t.Context()
	kept := storetest.Insert(t, pool, storetest.Row{StepID: "kept", Status: outbox.StatusFailed, Attempts: 3, NotBefore: time.Hour})
	cleared := storetest.Insert(t, pool, storetest.Row{StepID: "cleared", Status: outbox.StatusFailed, Attempts: 3, NotBefore: time.Hour})
	moved := storetest.Insert(t, pool, storetest.Row{StepID: "moved", Status: outbox.StatusSucceeded})

	done, err := st.Requeue(ctx, pool, []string{kept, moved}, []outbox.Status{outbox.StatusFailed, outbox.StatusFailed}, false)
	if err != nil || !slices.Equal(done, []string{kept}) {
		t.Fatalf("requeue: %v %v; want only %s", done, err, kept)
	}
	if r := storetest.Get(t, pool, kept); r.Status != outbox.StatusPending || r.Attempts != 0 || r.DueIn < 59*time.Minute {
		t.Fatalf("requeued row keeping its floor: %+v", r)
	}
	if r := storetest.Get(t, pool, moved); r.Status != outbox.StatusSucceeded {
		t.Fatalf("a row no longer failed was written: %+v", r)
	}
	if _, err := st.Requeue(ctx, pool, []string{cleared}, []outbox.Status{outbox.StatusFailed}, true); err != nil {
		t.Fatal(err)
	}
	if r := storetest.Get(t, pool, cleared); r.Status != outbox.StatusPending || r.DueIn > time.Second || r.Floor != 0 {
		t.Fatalf("requeued row with its floor cleared: %+v", r)
	}
}
