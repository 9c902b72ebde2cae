package store

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestConnectBesideIsBounded: a connection opened beside the pool (a
// listener's, the wake gate's, the gateway's) under a context without a
// deadline still gives up on a server that accepts and never answers,
// so no caller that forgets a bound is held for ever.
func TestConnectBesideIsBounded(t *testing.T) {
	t.Parallel()
	hole := testkit.NewSilent(t)
	port := strconv.Itoa(hole.Port)
	pc, err := pgxpool.ParseConfig("postgres://drainer@127.0.0.1:" + port + "/drainer?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	done := make(chan error, 1)
	go func() {
		conn, err := ConnectBeside(context.Background(), pool, "test")
		if conn != nil {
			_ = conn.Close(context.Background())
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("connected to a server that never answers")
		}
	case <-time.After(time.Minute):
		t.Fatal("ConnectBeside without a deadline still waits for a silent server after a minute")
	}
}
