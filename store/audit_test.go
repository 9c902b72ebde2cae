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

// TestAuditReasonOfEachAttempt: in one completion batch, an attempt sent
// that got no answer records why (its note) and no status; one answered
// records its status and no reason; one never sent records no answer and
// its own note. The chains verify.
func TestAuditReasonOfEachAttempt(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := context.Background()
	keys := storetest.Enqueue(t, pool, "run", "t", 3)
	rows, err := st.Claim(ctx, pool, store.Claim{Limit: 3, Lease: time.Minute, Replica: "r"})
	if err != nil || len(rows) != 3 {
		t.Fatalf("claim: %d rows, %v", len(rows), err)
	}
	timeout := "attempt 1 of 5: context deadline exceeded"
	cs := []store.Completion{
		{Seq: rows[0].Seq, Token: rows[0].LeaseToken, Attempts: rows[0].Attempts, Status: outbox.StatusPending,
			LastError: &timeout, Note: "sent: timeout"},
		{Seq: rows[1].Seq, Token: rows[1].LeaseToken, Attempts: rows[1].Attempts, Status: outbox.StatusSucceeded,
			Response: []byte(`{"ok": true}`), ResponseStatus: 200},
		{Seq: rows[2].Seq, Token: rows[2].LeaseToken, Attempts: rows[2].Attempts, Status: outbox.StatusPending,
			GiveBack: true, NoRequest: true, Note: "deferred: paused by an operator; no request sent"},
	}
	if _, err := st.Complete(ctx, pool, cs); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		rows[0].Key: "rescheduled status - reason sent: timeout",
		rows[1].Key: "succeeded status 200 reason -",
		rows[2].Key: "rescheduled status - reason deferred: paused by an operator; no request sent",
	}
	for _, k := range keys {
		trail, err := st.AuditTrail(ctx, pool, k)
		if err != nil || len(trail) != 2 {
			t.Fatalf("%s: %d entries, %v", k, len(trail), err)
		}
		e := trail[1]
		status, reason := "-", "-"
		if e.ResponseStatus != nil {
			status = fmt.Sprint(*e.ResponseStatus)
		}
		if e.Reason != nil {
			reason = *e.Reason
		}
		if got := fmt.Sprintf("%s status %s reason %s", e.Event, status, reason); got != want[k] {
			t.Errorf("%s: %q, want %q", k, got, want[k])
		}
	}
	if broken, err := st.VerifyAudit(ctx, pool, 10); err != nil || len(broken) != 0 {
		t.Fatalf("audit verify: %v %v", broken, err)
	}
}
