// Package natsjstest starts a JetStream server in the test's own process,
// for the tests of the nats adapter and of what builds it.
package natsjstest

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Start starts a JetStream server in this process on a free loopback port,
// storing in a temporary directory; stop shuts it down and removes the
// directory. desc names the server for a test's log.
func Start() (url, desc string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "natsjs-test-")
	if err != nil {
		return "", "", nil, err
	}
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir,
		NoLog: true, NoSigs: true,
	})
	if err != nil {
		os.RemoveAll(dir)
		return "", "", nil, fmt.Errorf("start an in-process nats server: %w", err)
	}
	go srv.Start()
	// Generous: a busy machine starts it in well under a second, and
	// waiting longer only delays a failure.
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		os.RemoveAll(dir)
		return "", "", nil, fmt.Errorf("the in-process nats server was not ready within 30s")
	}
	stop = func() {
		srv.Shutdown()
		srv.WaitForShutdown()
		os.RemoveAll(dir)
	}
	return srv.ClientURL(), "an in-process nats-server " + server.VERSION + " on " + srv.ClientURL(), stop, nil
}

// Server starts one for test t, stopped when t ends, and returns its URL.
func Server(t testing.TB) string {
	t.Helper()
	url, _, stop, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return url
}

// JetStream starts one for test t (Server) and returns its URL and a
// JetStream context on a connection of its own, both closed when t ends.
func JetStream(t testing.TB) (string, jetstream.JetStream) {
	t.Helper()
	url := Server(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return url, js
}
