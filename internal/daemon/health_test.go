package daemon

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/drainer-io/drainer/drainer"
)

// TestReadyzNamesAdaptersNotReady: with the database up, /readyz stays 200
// while an adapter cannot send (its rows wait, the others drain), and its
// body names that adapter and why; the database down or the daemon
// starting is a 503.
func TestReadyzNamesAdaptersNotReady(t *testing.T) {
	var ready atomic.Bool
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
	ready.Store(true)
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
