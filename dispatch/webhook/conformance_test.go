package webhook_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
	"github.com/drainer-io/drainer/dispatch/webhook"
)

// conformanceSecret is the bearer token the adapter is configured with.
const conformanceSecret = "whsec-conformance-0b7e"

// TestConformance runs the shared adapter suite against an httptest provider
// that honours idempotency keys and fails on demand.
func TestConformance(t *testing.T) {
	dispatchtest.Run(t, func(t *testing.T) (dispatch.Adapter, dispatchtest.Upstream, string) {
		up := newUpstream(t)
		a, err := webhook.New(webhook.Config{
			URL:     up.srv.URL + "/v1/{tool_name}",
			Headers: map[string]string{"Authorization": "Bearer " + conformanceSecret},
			Timeout: 5 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		return a, up, conformanceSecret
	})
}

// TestConformanceWithRoute runs the suite through a route with its own
// method, path and fixed query: every rule holds unchanged.
func TestConformanceWithRoute(t *testing.T) {
	dispatchtest.Run(t, func(t *testing.T) (dispatch.Adapter, dispatchtest.Upstream, string) {
		up := newUpstream(t)
		a, err := webhook.New(webhook.Config{
			URL:     up.srv.URL,
			Headers: map[string]string{"Authorization": "Bearer " + conformanceSecret},
			Timeout: 5 * time.Second,
			Routes: map[string]webhook.Route{dispatchtest.Tool: {
				Method: http.MethodPut, Path: "/v1/items/{tool_name}", Query: map[string]string{"v": "2"},
			}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return a, up, conformanceSecret
	})
}

// TestConformanceWithoutPathFields runs the suite through a route whose
// path reads a payload field that body: without_path_fields leaves out of
// the body: every rule holds unchanged.
func TestConformanceWithoutPathFields(t *testing.T) {
	dispatchtest.Run(t, func(t *testing.T) (dispatch.Adapter, dispatchtest.Upstream, string) {
		up := newUpstream(t)
		a, err := webhook.New(webhook.Config{
			URL:     up.srv.URL,
			Headers: map[string]string{"Authorization": "Bearer " + conformanceSecret},
			Timeout: 5 * time.Second,
			Routes: map[string]webhook.Route{dispatchtest.Tool: {
				Method: http.MethodPut, Path: "/v1/{tool_name}/{currency}", Body: webhook.BodyWithoutPathFields,
			}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return a, up, conformanceSecret
	})
}

// upstream is a provider with Stripe-like idempotency: the first 2xx of a
// key is stored with the request body; the same key and body get it again
// with Idempotency-Replay: true, another body gets 409 payload-mismatch.
// Injected faults are consumed one per request, before the key is looked at.
type upstream struct {
	srv     *httptest.Server
	release chan struct{} // closed at cleanup: hung handlers return

	mu      sync.Mutex
	faults  []dispatchtest.Fault
	bodies  map[string][]byte // key → body of the effect
	effects map[string]int
}

func newUpstream(t *testing.T) *upstream {
	up := &upstream{release: make(chan struct{}), bodies: map[string][]byte{}, effects: map[string]int{}}
	up.srv = httptest.NewServer(http.HandlerFunc(up.serve))
	t.Cleanup(up.srv.Close)
	t.Cleanup(func() { close(up.release) }) // runs first
	return up
}

func (up *upstream) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if r.Header.Get("Authorization") != "Bearer "+conformanceSecret || key == "" {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	up.mu.Lock()
	var fault dispatchtest.Fault
	if len(up.faults) > 0 {
		fault, up.faults = up.faults[0], up.faults[1:]
	}
	up.mu.Unlock()
	switch fault {
	case dispatchtest.FaultTransient:
		w.Header().Set("Retry-After", "1")
		http.Error(w, "try again", http.StatusServiceUnavailable)
		return
	case dispatchtest.FaultTerminal:
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		io.WriteString(w, `{"title":"Invalid amount","detail":"refused for good"}`)
		return
	case dispatchtest.FaultHang:
		select {
		case <-r.Context().Done():
		case <-up.release:
		}
		return
	}
	up.mu.Lock()
	prev, seen := up.bodies[key]
	if !seen {
		up.bodies[key] = body
		up.effects[key]++
	}
	up.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case seen && !bytes.Equal(prev, body):
		w.Header().Set("Idempotency-Conflict", "payload-mismatch")
		w.WriteHeader(http.StatusConflict)
		io.WriteString(w, `{"error":"key reused with another payload"}`)
	case seen:
		w.Header().Set("Idempotency-Replay", "true")
		io.WriteString(w, `{"id":"evt_1"}`)
	default:
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"evt_1"}`)
	}
}

func (up *upstream) Effects(_ *testing.T, key string) int {
	up.mu.Lock()
	defer up.mu.Unlock()
	return up.effects[key]
}

func (up *upstream) Inject(f dispatchtest.Fault, n int) bool {
	up.mu.Lock()
	defer up.mu.Unlock()
	for range n {
		up.faults = append(up.faults, f)
	}
	return true
}
