package gateway

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/store/storetest"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
)

// TestSettleListenerConnectIsBounded: a server that accepts the settle
// listener's connection and never answers (a half-dead proxy, a
// partition) does not leave the gateway deaf for good: the connect is
// given up after listenSetupWait and tried again, and once the server
// answers, the gateway listens. Before, the reconnect waited for ever
// under a context that never ends, and every call another replica
// settled was answered only by its waiter's re-read.
func TestSettleListenerConnectIsBounded(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	hole := testkit.NewSilent(t)
	var silent atomic.Bool
	silent.Store(true)
	var tries atomic.Int32
	cc := pool.Config().ConnConfig
	connect := func(ctx context.Context) (*pgx.Conn, error) {
		c := cc.Copy()
		if silent.Load() {
			c.Host, c.Port, c.Fallbacks, c.TLSConfig = "127.0.0.1", uint16(hole.Port), nil, nil
		}
		tries.Add(1)
		return pgx.ConnectConfig(ctx, c)
	}
	w := newSettleWatch(connect, "bounded_test.settled", slog.New(slog.DiscardHandler))
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); w.run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
	for deadline := time.Now().Add(time.Minute); tries.Load() < 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the listener never tried to connect")
		}
	}
	silent.Store(false)
	select {
	case <-w.listening:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the listener did not listen within 2 minutes of the server answering (%d connects tried)", tries.Load())
	}
}
