package drainer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestListenerConnectIsBounded: a server that accepts the listener's
// connection and never answers (a half-dead proxy, packets dropped) does
// not leave the replica deaf: the connect is given up after
// listenSetupWait and tried again, and once the server answers, the
// replica listens. Before, the connect waited for as long as TCP kept the
// connection, and the replica claimed on its poll alone meanwhile.
func TestListenerConnectIsBounded(t *testing.T) {
	t.Parallel()
	base := newPool(t)
	hole := testkit.NewSilent(t)
	accepted := hole.Accepted
	var deaf atomic.Bool
	deaf.Store(true)
	e := startBesideConnects(t, base, func(cc *pgx.ConnConfig) {
		if deaf.Load() && cc.RuntimeParams["application_name"] == "drainer-listen" {
			cc.Host, cc.Port, cc.Fallbacks, cc.TLSConfig = "127.0.0.1", uint16(hole.Port), nil, nil
		}
	})
	testkit.WaitFor(t, time.Minute, "the listener connecting to the silent server", func() (bool, string) { return accepted() >= 1, "" })
	deaf.Store(false)
	select {
	case <-e.listening:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the listener did not listen within 2 minutes of the server answering (%d connections to the silent one)", accepted())
	}
}

// TestWakeUpReconnectsBackOff: a wake-up connection (the listener's, the
// wake gate's) that the server kills as soon as it is opened is opened
// again with growing pauses, not at once in a loop: each successful
// connect used to reset the back-off, so a server that ended every new
// session (or a statement that always failed) got a connection storm
// exactly when it struggled. Over four seconds of sessions killed as they
// come, each connection is opened a handful of times (the pauses, 50 ms
// and up, doubling); before, dozens.
func TestWakeUpReconnectsBackOff(t *testing.T) {
	t.Parallel()
	base := newPool(t)
	var listens, wakes atomic.Int64
	e := startBesideConnects(t, base, func(cc *pgx.ConnConfig) {
		switch cc.RuntimeParams["application_name"] {
		case "drainer-listen":
			listens.Add(1)
		case "drainer-wake":
			wakes.Add(1)
		}
	})
	select {
	case <-e.listening:
	case <-time.After(time.Minute):
		t.Fatal("the listener did not listen within a minute")
	}
	l0, w0 := listens.Load(), wakes.Load()
	until := time.Now().Add(4 * time.Second)
	for time.Now().Before(until) {
		if _, err := base.Exec(t.Context(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		      WHERE application_name IN ('drainer-listen', 'drainer-wake') AND datname = current_database()`); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	l, w := listens.Load()-l0, wakes.Load()-w0
	t.Logf("in 4 s of sessions killed as they come: the listener connected %d times, the wake gate %d", l, w)
	if l > 20 || w > 20 {
		t.Fatalf("in 4 s of sessions killed as they come: the listener connected %d times, the wake gate %d; want a handful each (backing off)", l, w)
	}
	if l == 0 || w == 0 {
		t.Fatalf("the sessions were never killed: %d and %d connects", l, w)
	}
}

// startBesideConnects starts an engine on a pool of base's database whose
// every new connection (the wake-up's included: store.ConnectBeside uses
// the pool's config) goes through seen first.
func startBesideConnects(t *testing.T, base *pgxpool.Pool, seen func(*pgx.ConnConfig)) *Engine {
	t.Helper()
	cfg := base.Config()
	cfg.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
		seen(cc)
		return nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	a := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		return dispatch.Result{Outcome: dispatch.Success}
	})
	return startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"t": a}, &Route{Tool: "t"}), Config{Workers: 2})
}
