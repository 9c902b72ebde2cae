package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
)

// TestCallRecordIsTheStandingSettlement: the record a replay answers with
// is the one of the settlement the row stands in. A row settled, requeued
// by an operator and settled again answers the second attempt's result (or
// none, when that attempt got none), and a completion fenced out changes
// neither the record nor announces the key.
func TestCallRecordIsTheStandingSettlement(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := t.Context()
	key := storetest.Enqueue(t, pool, "run-calls", "t", 1)[0]

	listener, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Release()
	if _, err := listener.Exec(ctx, `LISTEN "`+st.SettleChannel()+`"`); err != nil {
		t.Fatal(err)
	}
	// announced counts the announcements of key that arrived.
	announced := func() int {
		n := 0
		for {
			wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			note, err := listener.Conn().WaitForNotification(wctx)
			cancel()
			if err != nil {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatal(err)
				}
				return n
			}
			if note.Payload == key {
				n++
			}
		}
	}
	settle := func(lease time.Duration, replica string, status outbox.Status, rec string) store.ClaimedRow {
		t.Helper()
		rows, err := st.Claim(ctx, pool, store.Claim{Limit: 1, Lease: lease, Replica: replica, Durable: true})
		if err != nil || len(rows) != 1 {
			t.Fatalf("claim: %d rows, %v", len(rows), err)
		}
		if status == "" {
			return rows[0]
		}
		c := store.Completion{Seq: rows[0].Seq, Token: rows[0].LeaseToken, Attempts: rows[0].Attempts, Gen: rows[0].Gen,
			Status: status, Response: []byte(`{}`), KeepNext: true, Announce: true}
		if rec != "" {
			c.Record = json.RawMessage(rec)
		}
		if done, err := st.Complete(ctx, pool, []store.Completion{c}); err != nil || len(done.Lost) != 0 {
			t.Fatalf("complete: lost %v, %v", done.Lost, err)
		}
		return rows[0]
	}
	record := func(want outbox.Status) string {
		t.Helper()
		c, err := st.Call(ctx, pool, key, store.AllRecords)
		if err != nil || c.Status != want {
			t.Fatalf("call: status %s, %v; want %s", c.Status, err, want)
		}
		return string(c.Record)
	}
	requeue := func(from outbox.Status) {
		t.Helper()
		if got, err := st.Requeue(ctx, pool, []string{key}, []outbox.Status{from}, true); err != nil || len(got) != 1 {
			t.Fatalf("requeue from %s: %v, %v", from, got, err)
		}
	}

	failedRec := `{"content":[{"type":"text","text":"card declined"}],"isError":true}`
	settle(time.Minute, "a", outbox.StatusFailed, failedRec)
	if got := record(outbox.StatusFailed); got != failedRec {
		t.Fatalf("record after the first settlement: %s; want %s", got, failedRec)
	}
	if n := announced(); n != 1 {
		t.Fatalf("first settlement announced %d times; want 1", n)
	}

	requeue(outbox.StatusFailed)
	okRec := `{"content":[{"type":"text","text":"charged"}]}`
	settle(time.Minute, "a", outbox.StatusSucceeded, okRec)
	if got := record(outbox.StatusSucceeded); got != okRec {
		t.Fatalf("record after the row was requeued and succeeded: %s; want the second attempt's %s", got, okRec)
	}
	if n := announced(); n != 1 {
		t.Fatalf("second settlement announced %d times; want 1", n)
	}
	// A record over the limit the read is given is left unread, and its
	// size said; one within it is read.
	if c, err := st.Call(ctx, pool, key, len(okRec)-1); err != nil || c.Record != nil || c.RecordBytes != int64(len(okRec)) || c.Status != outbox.StatusSucceeded {
		t.Fatalf("read with a limit under the record: %+v, %v; want the row without its record, and the record's size %d", c, err, len(okRec))
	}
	if c, err := st.Call(ctx, pool, key, len(okRec)); err != nil || string(c.Record) != okRec || c.RecordBytes != 0 {
		t.Fatalf("read with a limit of the record's size: %+v, %v; want the record", c, err)
	}

	requeue(outbox.StatusSucceeded)
	settle(time.Minute, "a", outbox.StatusFailed, "")
	if got := record(outbox.StatusFailed); got != "" {
		t.Fatalf("record after a settlement without a result: %s; want none", got)
	}
	announced()

	// A completion fenced out: its lease expired, the row was reclaimed,
	// claimed by another replica and settled there.
	requeue(outbox.StatusFailed)
	late := settle(10*time.Millisecond, "a", "", "")
	time.Sleep(50 * time.Millisecond)
	if n, err := st.Reclaim(ctx, pool, store.ReclaimPolicy{}); err != nil || n != 1 {
		t.Fatalf("reclaim: %d, %v", n, err)
	}
	ownerRec := `{"content":[{"type":"text","text":"owner"}]}`
	settle(time.Minute, "b", outbox.StatusSucceeded, ownerRec)
	if n := announced(); n != 1 {
		t.Fatalf("owner's settlement announced %d times; want 1", n)
	}
	stale := store.Completion{Seq: late.Seq, Token: late.LeaseToken, Attempts: late.Attempts, Gen: late.Gen,
		Status: outbox.StatusFailed, Response: []byte(`{}`), KeepNext: true, Announce: true,
		Record: json.RawMessage(`{"content":[{"type":"text","text":"stale"}],"isError":true}`)}
	if done, err := st.Complete(ctx, pool, []store.Completion{stale}); err != nil || len(done.Lost) != 1 {
		t.Fatalf("stale completion: lost %v, %v; want it fenced out", done.Lost, err)
	}
	if got := record(outbox.StatusSucceeded); got != ownerRec {
		t.Fatalf("record after a fenced-out completion: %s; want the owner's %s", got, ownerRec)
	}
	if n := announced(); n != 0 {
		t.Fatalf("a fenced-out completion announced the key %d times; want 0", n)
	}
}
