package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/drainer"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// TestReadyzNamesAdaptersNotReady: with the database up, /readyz stays 200
// while an adapter cannot send (its rows wait, the others drain), and its
// body names that adapter and why; the database down or the daemon
// starting is a 503.
func TestReadyzNamesAdaptersNotReady(t *testing.T) {
	t.Parallel()
	var ready readiness
	var dbErr error
	states := []drainer.AdapterState{
		{Adapter: "payments", Ready: false, Reason: "circuit breaker open"},
		{Adapter: "crm", Ready: true},
		{Adapter: "mail", Ready: false, Reason: "credentials refused on several routes (auth hold)"},
	}
	h := readyz(&ready, func(context.Context) error { return dbErr }, func() []drainer.AdapterState { return states })
	get := func() (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec.Code, rec.Body.String()
	}

	if code, body := get(); code != http.StatusServiceUnavailable || !strings.Contains(body, "starting") {
		t.Fatalf("starting: %d %q; want 503", code, body)
	}
	ready.setReady()
	code, body := get()
	if code != http.StatusOK || !strings.Contains(body, "payments (circuit breaker open)") ||
		!strings.Contains(body, "mail (credentials refused") || strings.Contains(body, "crm") {
		t.Fatalf("two adapters down, one up: %d %q; want 200 naming payments and mail only", code, body)
	}
	states = []drainer.AdapterState{{Adapter: "crm", Ready: true}}
	if code, body := get(); code != http.StatusOK || body != "ready\n" {
		t.Fatalf("every adapter ready: %d %q; want 200 ready", code, body)
	}
	dbErr = errors.New("connection refused")
	if code, body := get(); code != http.StatusServiceUnavailable || !strings.Contains(body, "database") {
		t.Fatalf("database down: %d %q; want 503", code, body)
	}
}

// TestReadyzSaysTheDatabaseIsUnreachableAtStartup: a daemon started while
// its database cannot be reached answers /readyz with a 503 that says so,
// not a bare "starting".
func TestReadyzSaysTheDatabaseIsUnreachableAtStartup(t *testing.T) {
	t.Parallel()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dbAddr := closed.Addr().String()
	_ = closed.Close() // nothing listens there now
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := ln.Addr().String()
	_ = ln.Close()
	cfg, err := config.Parse("c.yaml", []byte("adapters:\n  p: {type: http, url: \"http://127.0.0.1:1/{tool_name}\"}\nroutes:\n  t: {adapter: p}\n"), config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Config: cfg, DatabaseURL: "postgres://app@" + dbAddr + "/app?connect_timeout=1", MetricsAddr: metricsAddr,
			Logger: slog.New(slog.DiscardHandler)})
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("run did not stop")
		}
	}()
	testkit.WaitFor(t, 30*time.Second, "/readyz to say the database is unreachable", func() (bool, string) {
		resp, err := http.Get("http://" + metricsAddr + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(body), "database unreachable"),
			fmt.Sprintf("%d %q", resp.StatusCode, body)
	})
}
