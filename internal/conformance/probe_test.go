package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// heldEndpoint is a minimal correct endpoint whose first write of a key
// waits until another request with that key was answered in flight.
type heldEndpoint struct {
	mu       sync.Mutex
	done     map[string]bool
	conflict map[string]chan struct{}
}

func (e *heldEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(HeaderKey)
	e.mu.Lock()
	ch, seen := e.conflict[key]
	switch {
	case !seen:
		ch = make(chan struct{})
		e.conflict[key] = ch
		e.mu.Unlock()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
		}
		e.mu.Lock()
		e.done[key] = true
		e.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":1}`))
	case !e.done[key]:
		select {
		case <-ch:
		default:
			close(ch)
		}
		e.mu.Unlock()
		w.Header().Set(HeaderConflict, ConflictInFlight)
		w.Header().Set(HeaderRetryAfter, "1")
		w.WriteHeader(http.StatusConflict)
	default:
		e.mu.Unlock()
		w.Header().Set(HeaderReplay, "true")
		_, _ = w.Write([]byte(`{"id":1}`))
	}
}

// TestBurstUsesOneConnectionPerRequest: a burst of N opens N connections
// (the requests really come from many connections at once), and a retry
// after it settles on the replay.
func TestBurstUsesOneConnectionPerRequest(t *testing.T) {
	t.Parallel()
	e := &heldEndpoint{done: map[string]bool{}, conflict: map[string]chan struct{}{}}
	srv := httptest.NewUnstartedServer(e)
	var conns atomic.Int64
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	o, u, err := Options{URL: srv.URL, Concurrency: 12}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	p := newProber(o, u)
	defer p.close()
	b := p.burst(context.Background(), ModeSeed, 12, o.Payload)
	if len(b.answers) != 12 {
		t.Fatalf("%d answers, want 12", len(b.answers))
	}
	if n := conns.Load(); n < 12 {
		t.Fatalf("the burst of 12 opened %d connections", n)
	}
	if tl := count(ModeSeed, b); tl.first != 1 || tl.inFlight == 0 || tl.other != 0 {
		t.Fatalf("burst against a held first write: %s", tl)
	}
	if classify(ModeSeed, b.settle) != KindReplay || !bytes.Equal(b.settle.Body, []byte(`{"id":1}`)) {
		t.Fatalf("the retry after the burst got %s", describe(b.settle))
	}
}

func TestVariantDiffers(t *testing.T) {
	t.Parallel()
	for _, p := range []string{`{}`, ` { } `, `{"a":1}`, `[1,2]`, `"s"`, `null`, `3`} {
		v := variant([]byte(p))
		if !json.Valid(v) {
			t.Errorf("variant(%s) = %s is not JSON", p, v)
		}
		if bytes.Equal(bytes.TrimSpace(v), bytes.TrimSpace([]byte(p))) {
			t.Errorf("variant(%s) is the same", p)
		}
	}
}
