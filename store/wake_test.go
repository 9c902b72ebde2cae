package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestWakeGate: a producer's enqueue notifies only while a daemon holds a
// slot of the wake gate; a daemon cannot take a slot while a producer that
// enqueued without notifying has not committed; and it can once it has.
func TestWakeGate(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := context.Background()
	connect := func() *pgx.Conn {
		t.Helper()
		c, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
	listener, daemon := connect(), connect()
	if _, err := listener.Exec(ctx, `LISTEN "drainer.outbox"`); err != nil {
		t.Fatal(err)
	}
	var last *pgconn.Notification
	notified := func(within time.Duration) bool {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		n, err := listener.WaitForNotification(wctx)
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
		last = n
		return err == nil
	}
	// position reads where the claim order puts a run's first pending row.
	position := func(run string) store.Position {
		t.Helper()
		var p store.Position
		if err := pool.QueryRow(ctx, `SELECT next_attempt_at, seq FROM drainer.outbox WHERE agent_run_id = $1
			AND status = 'pending' ORDER BY next_attempt_at, seq LIMIT 1`, run).Scan(&p.Due, &p.Seq); err != nil {
			t.Fatal(err)
		}
		return p
	}
	wantPosition := func(run string) {
		t.Helper()
		got, ok := store.WakePosition(last.Payload)
		want := position(run)
		if !ok || !got.Due.Equal(want.Due) || got.Seq != want.Seq {
			t.Fatalf("notification %q: want the position of %s's first row %+v, got %+v (ok %v)", last.Payload, run, want, got, ok)
		}
	}

	// No daemon sleeps: the enqueue does not notify.
	storetest.Enqueue(t, pool, "run-a", "t", 1)
	if notified(300 * time.Millisecond) {
		t.Fatal("an enqueue notified while no daemon held the wake gate")
	}

	// A daemon holds a slot: the enqueue notifies.
	slot, err := st.TakeWakeSeat(ctx, daemon)
	if err != nil || slot < 0 {
		t.Fatalf("seat: %d %v", slot, err)
	}
	if held, err := st.HoldWake(ctx, daemon, slot, time.Second); err != nil || !held {
		t.Fatalf("hold: %v %v", held, err)
	}
	storetest.Enqueue(t, pool, "run-b", "t", 1)
	if !notified(10 * time.Second) {
		t.Fatal("an enqueue did not notify while a daemon held the wake gate")
	}
	wantPosition("run-b")
	// The same intent again inserts nothing, and says nothing.
	if _, err := pool.Exec(ctx, `SELECT * FROM drainer.enqueue('run-b', 'step-0', 't', '', '{"i":0}')`); err != nil {
		t.Fatal(err)
	}
	if notified(300 * time.Millisecond) {
		t.Fatalf("a duplicate enqueue notified (%q)", last.Payload)
	}
	// A row that is never due (a direct insert at 'infinity') is written,
	// and wakes nobody.
	if _, err := pool.Exec(ctx, `INSERT INTO drainer.outbox
		(key, agent_run_id, step_id, tool_name, payload, payload_hash, next_attempt_at) VALUES
		('k-never', 'run-e', 'never', 't', '{}', '\x00', 'infinity')`); err != nil {
		t.Fatalf("an insert due at infinity failed while a daemon held the gate: %v", err)
	}
	if notified(300 * time.Millisecond) {
		t.Fatalf("a row due at infinity notified (%q)", last.Payload)
	}
	// A statement that queues several rows (as enqueue_batch does) names
	// its first pending row in claim order: not the first inserted (due
	// later), nor a cancelled one.
	if _, err := pool.Exec(ctx, `WITH v(key, step, due, status) AS (VALUES
		    ('k-late', 'late', now() + interval '1 hour', 'pending'),
		    ('k-early', 'early', now() - interval '1 hour', 'pending'),
		    ('k-gone', 'gone', now() - interval '2 hours', 'cancelled')),
		i AS (INSERT INTO drainer.intents (key, agent_run_id, step_id, tool_name, business_scope, kind, payload, payload_hash)
		      SELECT key, 'run-d', step, 't', '', 'forward', '{}', '\x00' FROM v RETURNING seq, key)
		INSERT INTO drainer.queue (seq, tool_name, business_scope, kind, next_attempt_at, status)
		SELECT i.seq, 't', '', 'forward', v.due, v.status FROM i JOIN v ON v.key = i.key ORDER BY i.seq`); err != nil {
		t.Fatal(err)
	}
	if !notified(10 * time.Second) {
		t.Fatal("a batch enqueue did not notify while a daemon held the wake gate")
	}
	wantPosition("run-d")
	if err := st.ReleaseWake(ctx, daemon, slot); err != nil {
		t.Fatal(err)
	}

	// A producer enqueued without notifying and has not committed: the
	// daemon cannot hold the gate (its rows are not visible yet) ...
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT * FROM drainer.enqueue('run-c', 's', 't', '', '{}')`); err != nil {
		t.Fatal(err)
	}
	if slot, err = st.TakeWakeSeat(ctx, daemon); err != nil || slot < 0 {
		t.Fatalf("seat: %d %v", slot, err)
	}
	if held, err := st.HoldWake(ctx, daemon, slot, 100*time.Millisecond); err != nil || held {
		t.Fatalf("hold while a producer's transaction is open: held %v, err %v; want not held", held, err)
	}
	// ... and keeps its seat: no other daemon takes that slot meanwhile.
	other := connect()
	if s, err := st.TakeWakeSeat(ctx, other); err != nil || s < 0 || s == slot {
		t.Fatalf("another daemon's seat while slot %d waits for its lock: %d %v", slot, s, err)
	} else if err := st.ReleaseWakeSeat(ctx, other, s); err != nil {
		t.Fatal(err)
	}
	// Once the producer commits, it holds the lock of the seat it kept.
	commit := make(chan error, 1)
	go func() {
		time.Sleep(200 * time.Millisecond)
		commit <- tx.Commit(ctx)
	}()
	if held, err := st.HoldWake(ctx, daemon, slot, 30*time.Second); err != nil || !held {
		t.Fatalf("hold after the producer committed: %v %v", held, err)
	}
	if err := <-commit; err != nil {
		t.Fatal(err)
	}
	var visible int
	if err := daemon.QueryRow(ctx, `SELECT count(*) FROM drainer.outbox WHERE agent_run_id = 'run-c'`).Scan(&visible); err != nil || visible != 1 {
		t.Fatalf("the producer's row is not visible once the gate is held: %d %v", visible, err)
	}
	// Every seat taken by other daemons: none left.
	others := make([]*pgx.Conn, store.WakeSlots)
	for i := range others {
		others[i] = connect()
	}
	taken := 1
	for _, c := range others {
		s, err := st.TakeWakeSeat(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if s >= 0 {
			taken++
		}
	}
	if taken != store.WakeSlots {
		t.Fatalf("%d seats taken, want %d", taken, store.WakeSlots)
	}
}
