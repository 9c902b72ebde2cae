package store_test

import (
	"testing"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
)

// TestKeyWindowOutlivesRequeueAndGiveBack: a row's first attempt, once a
// request may have gone out, stays its first attempt: through an
// operator's requeue (attempts back to 0) and a later attempt given back
// (the key-TTL guard's failure, a 401), so the guard keeps measuring from
// it. Only an attempt given back by the claim that opened the window (no
// request ever out) leaves the row without one.
func TestKeyWindowOutlivesRequeueAndGiveBack(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := t.Context()
	claim := func(key string) store.ClaimedRow {
		t.Helper()
		rows, err := st.Claim(ctx, pool, store.Claim{Limit: 1, Lease: time.Minute, Replica: "r", Durable: true})
		if err != nil || len(rows) != 1 || rows[0].Key != key {
			t.Fatalf("claim: %d rows, %v; want %s", len(rows), err, key)
		}
		return rows[0]
	}
	complete := func(r store.ClaimedRow, status outbox.Status, giveBack bool) {
		t.Helper()
		c := store.Completion{Seq: r.Seq, Token: r.LeaseToken, Attempts: r.Attempts, Gen: r.Gen, Status: status,
			GiveBack: giveBack, NoRequest: giveBack, KeepNext: true, LastError: new(string)}
		if done, err := st.Complete(ctx, pool, []store.Completion{c}); err != nil || len(done.Lost) != 0 {
			t.Fatalf("complete: lost %v, %v", done.Lost, err)
		}
	}
	first := func(key string) *time.Time {
		t.Helper()
		var at *time.Time
		if err := pool.QueryRow(ctx, `SELECT first_attempt_at FROM `+storetest.Schema+`.outbox WHERE key = $1`, key).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	requeue := func(key string) {
		t.Helper()
		if got, err := st.Requeue(ctx, pool, []string{key}, []outbox.Status{outbox.StatusFailed}, true); err != nil || len(got) != 1 {
			t.Fatalf("requeue: %v, %v", got, err)
		}
	}

	// Nothing ever sent: the window the claim opened is closed again.
	fresh := storetest.Enqueue(t, pool, "run-fresh", "t", 1)[0]
	complete(claim(fresh), outbox.StatusPending, true)
	if at := first(fresh); at != nil {
		t.Fatalf("a row whose only attempt was given back has first_attempt_at %s; want none", at)
	}
	complete(claim(fresh), outbox.StatusFailed, false) // sent, and refused for good

	// Sent (failed), requeued, and the next attempt given back: the
	// first attempt stands, through a second requeue too.
	sent := first(fresh)
	if sent == nil {
		t.Fatal("a row whose attempt was sent has no first_attempt_at")
	}
	requeue(fresh)
	complete(claim(fresh), outbox.StatusFailed, true)
	if at := first(fresh); at == nil || !at.Equal(*sent) {
		t.Fatalf("after a requeue and an attempt given back, first_attempt_at is %v; want the first request's %s", at, sent)
	}
	requeue(fresh)
	if r := claim(fresh); !r.FirstAttemptAt.Equal(*sent) {
		t.Fatalf("claimed after a second requeue with first attempt %s; want %s: the guard measures from the first request", r.FirstAttemptAt, sent)
	}
}
