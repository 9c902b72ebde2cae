package gateway

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/jackc/pgx/v5"
)

// TestSettleListenerSurvivesKilledConnection: when the settle listener's
// connection is killed (a restart, an idle-connection killer), the
// listener connects again, every waiting call is woken to read its row,
// and announcements reach waiting calls again: the gateway never stays
// deaf.
func TestSettleListenerSurvivesKilledConnection(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	ctx := t.Context()
	const app = "drainer gateway settle test"
	var connects atomic.Int32
	cc := pool.Config().ConnConfig
	connect := func(ctx context.Context) (*pgx.Conn, error) {
		c := cc.Copy()
		c.RuntimeParams["application_name"] = app
		conn, err := pgx.ConnectConfig(ctx, c)
		if err == nil {
			connects.Add(1)
		}
		return conn, err
	}
	const channel = "settle_test.settled"
	w := newSettleWatch(connect, channel, slog.New(slog.DiscardHandler))
	var heard atomic.Int32
	w.heard = func() { heard.Add(1) }
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.run(wctx) }()
	t.Cleanup(func() { stop(); <-done })
	<-w.listening

	ch, cancel := w.watch("k1")
	defer cancel()
	other, cancelOther := w.watch("k2")
	defer cancelOther()
	notify := func(key string) {
		t.Helper()
		if _, err := pool.Exec(ctx, `SELECT pg_notify($1, $2)`, channel, key); err != nil {
			t.Fatal(err)
		}
	}
	// received waits for a wake-up on c; a listener that is deaf never
	// gives one, so the bound only ends the test.
	received := func(c chan *store.Call) bool {
		select {
		case <-c:
			return true
		case <-time.After(time.Minute):
			return false
		}
	}
	notify("k1")
	if !received(ch) {
		t.Fatal("the announcement of k1 did not reach its waiting call")
	}
	if n := heard.Load(); n != 1 {
		t.Fatalf("the listener counted %d notifications heard; want 1", n)
	}

	var killed int
	if err := pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminate the listener's connection: %d killed, %v", killed, err)
	}
	// Woken when the listener is back, to read their rows again.
	if !received(ch) || !received(other) {
		t.Fatal("the waiting calls were not woken when the listener lost its connection")
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		w.mu.Lock()
		listens := w.listens
		w.mu.Unlock()
		if listens == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the listener did not LISTEN again after its connection was killed (%d LISTENs, %d connections)", listens, connects.Load())
		}
	}
	if n := connects.Load(); n != 2 {
		t.Fatalf("the listener connected %d times; want 2 (once more after its connection was killed)", n)
	}
	// Whatever woke them until now is read; from here on only an
	// announcement does.
	for _, c := range []chan *store.Call{ch, other} {
		select {
		case <-c:
		default:
		}
	}
	notify("k1")
	if !received(ch) {
		t.Fatal("after its connection was killed, the listener did not deliver announcements: the gateway is deaf")
	}
	if n := heard.Load(); n != 2 {
		t.Fatalf("the listener counted %d notifications heard; want 2 (one before its connection was killed, one after)", n)
	}
	select {
	case <-other:
		t.Fatal("k1's announcement woke the call waiting for k2")
	default:
	}
}
