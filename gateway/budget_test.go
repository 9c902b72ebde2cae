package gateway

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
)

// TestLargeResultsAreReadWithinTheBudget: a row's large result is left
// unread by the row's read, and read only once the answers' budget has
// room for it; the room is held until the answer is written (the hold
// given back), and then free again. A call whose wait ends first is told
// the gateway is busy; a small result needs no room.
func TestLargeResultsAreReadWithinTheBudget(t *testing.T) {
	t.Parallel()
	g := bareGateway(t)
	pool, st := g.cfg.DB, g.cfg.Store
	ctx := t.Context()
	settled := func(run, rec string) string {
		t.Helper()
		key := storetest.Enqueue(t, pool, run, "t", 1)[0]
		rows, err := st.Claim(ctx, pool, store.Claim{Limit: 1, Lease: time.Minute, Replica: "r", Durable: true})
		if err != nil || len(rows) != 1 {
			t.Fatalf("claim: %d rows, %v", len(rows), err)
		}
		c := store.Completion{Seq: rows[0].Seq, Token: rows[0].LeaseToken, Attempts: rows[0].Attempts, Gen: rows[0].Gen,
			Status: outbox.StatusSucceeded, Response: []byte(`{}`), KeepNext: true, Announce: true, Record: json.RawMessage(rec)}
		if _, err := st.Complete(ctx, pool, []store.Completion{c}); err != nil {
			t.Fatal(err)
		}
		return key
	}
	bigRec := `{"content":[{"type":"text","text":"` + strings.Repeat("x", 200<<10) + `"}]}`
	big := settled("run-big", bigRec)
	small := settled("run-small", `{"content":[{"type":"text","text":"ok"}]}`)

	c, err := g.read(ctx, big, largeAnswer)
	if err != nil || c.Record != nil || c.RecordBytes != int64(len(bigRec)) || !c.Settled() {
		t.Fatalf("the row's read: status %s, record of %d bytes read, %d said, %v; want it settled, its record unread, its size %d",
			c.Status, len(c.Record), c.RecordBytes, err, len(bigRec))
	}
	if err := g.answers.Acquire(ctx, answerBudget); err != nil { // the budget taken whole
		t.Fatal(err)
	}
	if s, err := g.read(ctx, small, largeAnswer); err != nil || s.Record == nil {
		t.Fatalf("a small result's read: %d bytes, %v; want its record", len(s.Record), err)
	} else if got, err := g.budgeted(ctx, s, time.Now().Add(time.Minute)); err != nil || string(got.Record) != string(s.Record) {
		t.Fatalf("a small result with the budget taken: %d bytes, %v; want it answered at once", len(got.Record), err)
	}
	if _, err := g.budgeted(ctx, c, time.Now().Add(50*time.Millisecond)); !errors.Is(err, errAnswersBusy) {
		t.Fatalf("a large result whose wait ends with the budget taken: %v; want errAnswersBusy", err)
	}

	hctx, answered := withAnswerHold(ctx)
	type result struct {
		c   store.Call
		err error
	}
	got := make(chan result, 1)
	go func() {
		c, err := g.budgeted(hctx, c, time.Now().Add(time.Minute))
		got <- result{c, err}
	}()
	select {
	case r := <-got:
		t.Fatalf("a large result was read with no room in the budget: %d bytes, %v", len(r.c.Record), r.err)
	case <-time.After(100 * time.Millisecond):
	}
	g.answers.Release(answerBudget)
	r := <-got
	if r.err != nil || string(r.c.Record) != bigRec || r.c.Status != outbox.StatusSucceeded {
		t.Fatalf("once the budget had room: %d bytes, status %s, %v; want the whole record", len(r.c.Record), r.c.Status, r.err)
	}
	if g.answers.TryAcquire(answerBudget) {
		t.Fatal("the budget was whole again before the answer was written; want its room held until then")
	}
	answered()
	if !g.answers.TryAcquire(answerBudget) {
		t.Fatal("the budget was not whole again once the answer was written")
	}
	g.answers.Release(answerBudget)

	// The agent hung up and its request ended before its call took room:
	// the room is given back at once, not held for an answer never written.
	gone, ended := withAnswerHold(ctx)
	ended()
	if r, err := g.budgeted(gone, c, time.Now().Add(time.Minute)); err != nil || string(r.Record) != bigRec {
		t.Fatalf("a large result after its request ended: %d bytes, %v; want it read", len(r.Record), err)
	}
	if !g.answers.TryAcquire(answerBudget) {
		t.Fatal("room taken after the request ended was kept; want it given back at once")
	}
}
