package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
)

// TestAuditOneEntryPerAttempt: a row's chain holds its enqueue and one entry
// per attempt, written by what ended the attempt (a completion, or the
// reclaim of a lease that expired), never one for the claim; the attempt
// count of each entry is the attempt it ended, and the chain verifies.
func TestAuditOneEntryPerAttempt(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := context.Background()
	key := storetest.Enqueue(t, pool, "run", "t", 1)[0]
	claim := func(lease time.Duration) store.ClaimedRow {
		t.Helper()
		rows, err := st.Claim(ctx, pool, store.Claim{Limit: 1, Lease: lease, Replica: "r"})
		if err != nil || len(rows) != 1 {
			t.Fatalf("claim: %d rows, %v", len(rows), err)
		}
		return rows[0]
	}
	complete := func(r store.ClaimedRow, status outbox.Status) {
		t.Helper()
		if _, err := st.Complete(ctx, pool, []store.Completion{{Seq: r.Seq, Token: r.LeaseToken, Status: status}}); err != nil {
			t.Fatal(err)
		}
	}
	complete(claim(time.Minute), outbox.StatusPending) // attempt 1: retry at once
	claim(time.Millisecond)                            // attempt 2: the worker is lost
	time.Sleep(10 * time.Millisecond)
	if n, err := st.Reclaim(ctx, pool, store.ReclaimPolicy{}); err != nil || n != 1 {
		t.Fatalf("reclaim: %d, %v", n, err)
	}
	complete(claim(time.Minute), outbox.StatusSucceeded) // attempt 3

	trail, err := st.AuditTrail(ctx, pool, key)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range trail {
		got = append(got, fmt.Sprintf("%s %s->%s #%d", e.Event, deref(e.FromStatus), deref(e.ToStatus), derefInt(e.Attempts)))
	}
	want := []string{
		"enqueued ->pending #0",
		"rescheduled in_flight->pending #1",
		"rescheduled in_flight->pending #2",
		"succeeded in_flight->succeeded #3",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("audit trail:\n got %q\nwant %q", got, want)
	}
	broken, err := st.VerifyAudit(ctx, pool, 10)
	if err != nil || len(broken) != 0 {
		t.Fatalf("audit verify: %v %v", broken, err)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func derefInt(i *int) int {
	if i == nil {
		return -1
	}
	return *i
}
