package builtin

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/idemkey"
)

// TestHTTPKeyPlacementFromRoutes: Build hands each route's idempotency_key to
// its http adapter; other tools keep the adapter's placement.
func TestHTTPKeyPlacementFromRoutes(t *testing.T) {
	var mu sync.Mutex
	got := map[string]*http.Request{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.URL.Path] = r.Clone(r.Context())
		mu.Unlock()
		w.WriteHeader(200)
	}))
	t.Cleanup(srv.Close)
	cfg, err := config.Parse("c.yaml", []byte(`
adapters:
  p:
    type: http
    url: `+srv.URL+`/{tool_name}
    idempotency_key: {name: idem, location: query}
routes:
  a: {adapter: p}
  b: {adapter: p, idempotency_key: {name: X-Key, location: header}}
`), config.LoadOptions{Check: true})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := Build(t.Context(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	e, _ := reg.Get("p")
	t.Cleanup(func() { closeAdapter(e.Adapter) })
	keys := map[string]string{}
	for _, tool := range []string{"a", "b"} {
		tuple := idemkey.Tuple{AgentRunID: "r", StepID: "s", ToolName: tool}
		keys[tool] = tuple.Key()
		if r := e.Adapter.Dispatch(t.Context(), &dispatch.Message{Key: tuple.Key(), Tuple: tuple, Payload: json.RawMessage(`{}`), Attempt: 1}); r.Outcome != dispatch.Success {
			t.Fatalf("%s: %v %v", tool, r.Outcome, r.Err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if q := got["/a"].URL.Query().Get("idem"); q != keys["a"] {
		t.Errorf("tool a: query idem = %q, want the key (adapter placement)", q)
	}
	if h := got["/b"].Header.Get("X-Key"); h != keys["b"] || got["/b"].URL.RawQuery != "" {
		t.Errorf("tool b: X-Key = %q, query %q; want the route's header placement only", h, got["/b"].URL.RawQuery)
	}
}
