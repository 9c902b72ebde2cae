package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
)

// TestEnqueueUnannouncedNotifiesNobody: while a daemon sleeps (its wake
// slot held), an unannounced enqueue records its row and sends no
// notification: the first one the listener gets is that of an ordinary
// enqueue committed after it (notifications arrive in commit order), which
// names its own row; WakeAll's notification follows, naming no position.
// A second unannounced enqueue of the same tuple is a replay.
func TestEnqueueUnannouncedNotifiesNobody(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := context.Background()
	listener, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Release()
	if _, err := listener.Exec(ctx, `LISTEN "drainer.outbox"`); err != nil {
		t.Fatal(err)
	}
	sleeper, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sleeper.Release()
	slot, err := st.TakeWakeSeat(ctx, sleeper.Conn())
	if err != nil || slot < 0 {
		t.Fatalf("seat: %d %v", slot, err)
	}
	if held, err := st.HoldWake(ctx, sleeper.Conn(), slot, 10*time.Second); err != nil || !held {
		t.Fatalf("hold: %v %v", held, err)
	}
	defer func() { _ = st.ReleaseWake(context.Background(), sleeper.Conn(), slot) }()

	quiet := store.Intent{AgentRunID: "r", StepID: "quiet", ToolName: "t", Payload: []byte(`{}`)}
	e, err := st.EnqueueUnannounced(ctx, pool, quiet)
	if err != nil || !e.Created {
		t.Fatalf("unannounced enqueue: %+v, %v", e, err)
	}
	if again, err := st.EnqueueUnannounced(ctx, pool, quiet); err != nil || again.Created || again.Key != e.Key {
		t.Fatalf("the same tuple again: %+v, %v; want a replay of %s", again, err, e.Key)
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
		t.Fatalf("first notification %q, want the ordinary enqueue's (row %s): the unannounced one notified", n.Payload, loudSeq)
	}
	if err := st.WakeAll(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if n, err := listener.Conn().WaitForNotification(wctx); err != nil || n.Payload != "" {
		t.Fatalf("WakeAll: %+v, %v; want a notification naming no position", n, err)
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM drainer.outbox WHERE key = $1 AND status = 'pending'`, e.Key).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("the unannounced row: %d pending, %v", rows, err)
	}
}
