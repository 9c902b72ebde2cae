//go:build unix

package pgtemp

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// controlTimeout bounds one Restart, Shutdown or Startup in these tests:
// generous, so that only a server that never comes back fails them.
const controlTimeout = 2 * time.Minute

func controlCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), controlTimeout)
	t.Cleanup(cancel)
	return ctx
}

func mustPostmaster(t *testing.T, c *Cluster) int {
	t.Helper()
	pid, ok := postmasterPID(c.dataDir())
	if !ok || !processAlive(pid) {
		t.Fatal("no running postmaster")
	}
	return pid
}

func TestRestartKeepsPortAndData(t *testing.T) {
	t.Parallel()
	c := startCluster(t, Options{Logger: testLogger(t)})
	port, url := c.Port(), c.URL("postgres")
	before := mustPostmaster(t, c)

	conn := connect(t, url)
	if _, err := conn.Exec(t.Context(), "CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)"); err != nil {
		t.Fatal(err)
	}

	if err := c.Restart(controlCtx(t)); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if c.Port() != port || c.URL("postgres") != url {
		t.Errorf("after Restart: port %d, URL %s; want %d, %s", c.Port(), c.URL("postgres"), port, url)
	}
	if after := mustPostmaster(t, c); after == before {
		t.Errorf("postmaster pid %d unchanged: the server was not restarted", after)
	}
	// The connection opened before the restart was closed by the server.
	if _, err := conn.Exec(t.Context(), "SELECT 1"); err == nil {
		t.Error("a connection from before the restart still works")
	}
	var v int
	if err := connect(t, url).QueryRow(t.Context(), "SELECT v FROM kept").Scan(&v); err != nil || v != 42 {
		t.Errorf("after Restart: SELECT v FROM kept = %d, %v; want 42", v, err)
	}
}

func TestShutdownStartup(t *testing.T) {
	t.Parallel()
	c := startCluster(t, Options{})
	port := c.Port()
	ctx := controlCtx(t)

	if err := c.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second); err == nil {
		conn.Close()
		t.Errorf("port %d accepts connections after Shutdown", port)
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	if err := c.Pause(); err == nil {
		t.Error("Pause of a server that is down succeeded")
	}
	if err := c.Resume(); err != nil {
		t.Errorf("Resume of a server that is down: %v", err)
	}

	if err := c.Startup(ctx); err != nil {
		t.Fatalf("Startup: %v", err)
	}
	if err := pingOnce(ctx, c.URL("postgres")); err != nil {
		t.Errorf("ping after Startup: %v", err)
	}
	if err := c.Startup(ctx); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("Startup of a running server: %v, want an error saying it is already running", err)
	}
}

func TestShutdownThenStop(t *testing.T) {
	t.Parallel()
	c, err := Start(controlCtx(t), Options{})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	root, port := c.root, c.Port()
	postmaster := mustPostmaster(t, c)
	if err := c.Shutdown(controlCtx(t)); err != nil {
		c.Stop()
		t.Fatalf("Shutdown: %v", err)
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop after Shutdown: %v", err)
	}
	assertStopped(t, root, port, postmaster)
}

// TestStartupPortTaken: while another process holds the cluster's port,
// Startup retries for a while and then says the port is in use.
func TestStartupPortTaken(t *testing.T) {
	t.Parallel()
	c := startCluster(t, Options{})
	ctx := controlCtx(t)
	if err := c.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port())))
	if err != nil {
		t.Fatalf("take the cluster's port: %v", err)
	}
	err = c.Startup(ctx)
	l.Close()
	if !errors.Is(err, errPortInUse) {
		t.Fatalf("Startup on a taken port: %v, want errPortInUse", err)
	}
	if !strings.Contains(err.Error(), "server log:") {
		t.Errorf("error %q does not quote the server log", err)
	}
	if err := c.Startup(ctx); err != nil {
		t.Fatalf("Startup once the port is free: %v", err)
	}
	if err := pingOnce(ctx, c.URL("postgres")); err != nil {
		t.Errorf("ping: %v", err)
	}
}

// serverProcesses returns the postmaster and every process descending
// from it.
func serverProcesses(t *testing.T, c *Cluster) []int {
	t.Helper()
	pm := mustPostmaster(t, c)
	kids, err := descendants(pm)
	if err != nil {
		t.Fatal(err)
	}
	return append(kids, pm)
}

func processState(pid int) string {
	if f := procStat(pid); len(f) > 0 {
		return f[0]
	}
	return "gone"
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	c := startCluster(t, Options{Logger: testLogger(t)})
	t.Cleanup(func() {
		if err := c.Resume(); err != nil {
			t.Errorf("Resume: %v", err)
		}
	})
	pm := mustPostmaster(t, c)
	conn := connect(t, c.URL("postgres"))
	var backend int
	if err := conn.QueryRow(t.Context(), "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		t.Fatal(err)
	}
	// Why Pause cannot signal the postmaster's process group alone.
	pmGroup, _ := syscall.Getpgid(pm)
	backendGroup, _ := syscall.Getpgid(backend)
	t.Logf("postmaster %d (group %d), backend %d (group %d)", pm, pmGroup, backend, backendGroup)

	if err := c.Pause(); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	procs := serverProcesses(t, c)
	if len(procs) < 3 {
		t.Errorf("only %d server processes found: %v", len(procs), procs)
	}
	sawBackend := false
	for _, pid := range procs {
		sawBackend = sawBackend || pid == backend
		// A process that had already exited (a zombie awaiting its reap by
		// the stopped postmaster, or gone) runs nothing either.
		switch st := processState(pid); st {
		case "T", "t", "Z", "X", "x", "gone":
		default:
			t.Errorf("pid %d in state %s after Pause, want T (stopped) or exited", pid, st)
		}
	}
	if !sawBackend {
		t.Errorf("the connection's backend %d is not among the server's processes %v", backend, procs)
	}

	// A query sent while paused is not answered until Resume. Waiting a
	// moment proves nothing by itself; a stopped server cannot answer at
	// all, so any answer before Resume is a failure.
	answer := make(chan error, 1)
	var v int
	go func() { answer <- conn.QueryRow(context.Background(), "SELECT 42").Scan(&v) }()
	select {
	case err := <-answer:
		t.Fatalf("query answered while the server was paused (%d, %v)", v, err)
	case <-time.After(500 * time.Millisecond):
	}

	if err := c.Resume(); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	select {
	case err := <-answer:
		if err != nil || v != 42 {
			t.Errorf("query sent while paused: %d, %v; want 42", v, err)
		}
	case <-time.After(controlTimeout):
		t.Fatal("query sent while paused not answered after Resume")
	}
	for _, pid := range serverProcesses(t, c) {
		if st := processState(pid); st == "T" || st == "t" {
			t.Errorf("pid %d still stopped after Resume", pid)
		}
	}
	if err := c.Resume(); err != nil {
		t.Errorf("second Resume: %v", err)
	}
}

// TestRestartWhilePaused: Restart resumes a paused server before shutting
// it down, instead of waiting on processes that cannot act on the signal.
func TestRestartWhilePaused(t *testing.T) {
	t.Parallel()
	c := startCluster(t, Options{})
	t.Cleanup(func() { _ = c.Resume() })
	before := mustPostmaster(t, c)
	if err := c.Pause(); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	ctx := controlCtx(t)
	if err := c.Restart(ctx); err != nil {
		t.Fatalf("Restart while paused: %v", err)
	}
	if after := mustPostmaster(t, c); after == before {
		t.Errorf("postmaster pid %d unchanged", after)
	}
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatalf("connect after Restart: %v", err)
	}
	defer conn.Close(context.Background())
	if err := conn.Ping(ctx); err != nil {
		t.Errorf("ping after Restart: %v", err)
	}
}
