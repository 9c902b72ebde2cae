package stripe

import (
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"sync"
	"testing"

	"github.com/drainer-io/drainer/dispatch/dispatchtest"
)

// testAPIKey is the key the tests configure; it must never appear in errors.
const testAPIKey = "sk_test_4eC39HqLyjWDarjtT1zdp7dc"

// answer is a scripted reply.
type answer struct {
	status int
	header http.Header
	body   string
}

// fakeStripe imitates what stripe-mock does not model: Stripe's idempotency
// layer. Per Idempotency-Key it stores the first answer that began
// execution (success or card error), with a hash of method, path and body:
// the same request again gets that answer with Idempotent-Replayed: true;
// other parameters get 400 idempotency_error, whose message quotes the key
// as Stripe's does. Faults (dispatchtest) are consumed one per request
// before the key is looked at; script, when set, answers instead of the
// normal flow if it returns non-nil.
type fakeStripe struct {
	srv     *httptest.Server
	release chan struct{}
	script  func(r *http.Request, body []byte) *answer

	mu       sync.Mutex
	faults   []dispatchtest.Fault
	stored   map[string]storedAnswer
	effects  map[string]int
	requests []seenRequest
	objects  int
}

type storedAnswer struct {
	hash   [32]byte
	answer answer
}

type seenRequest struct {
	method, path string
	header       http.Header
	body         string
}

var _ dispatchtest.Upstream = (*fakeStripe)(nil)

func newFakeStripe(t testing.TB) *fakeStripe {
	f := &fakeStripe{release: make(chan struct{}), stored: map[string]storedAnswer{}, effects: map[string]int{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	t.Cleanup(func() { close(f.release) }) // runs first: hung handlers return
	return f
}

func stripeError(status int, typ, code, message string, kv ...string) answer {
	h := http.Header{"Content-Type": {"application/json"}, "Request-Id": {"req_test123"}}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	body := fmt.Sprintf(`{"error":{"type":%q,"code":%q,"message":%q}}`, typ, code, message)
	return answer{status: status, header: h, body: body}
}

func (f *fakeStripe) serve(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	body := string(raw)
	key := r.Header.Get("Idempotency-Key")
	f.mu.Lock()
	f.requests = append(f.requests, seenRequest{method: r.Method, path: r.URL.Path, header: r.Header.Clone(), body: body})
	var fault dispatchtest.Fault
	if len(f.faults) > 0 {
		fault, f.faults = f.faults[0], f.faults[1:]
	}
	f.mu.Unlock()

	a := f.answer(r, key, body, fault)
	if a == nil { // hang
		select {
		case <-r.Context().Done():
		case <-f.release:
		}
		return
	}
	for k, v := range a.header {
		w.Header()[k] = v
	}
	w.WriteHeader(a.status)
	io.WriteString(w, a.body)
}

// answer decides the reply; nil means hang.
func (f *fakeStripe) answer(r *http.Request, key, body string, fault dispatchtest.Fault) *answer {
	if r.Header.Get("Authorization") != "Bearer "+testAPIKey {
		a := stripeError(401, "invalid_request_error", "", "Invalid API Key provided: sk_test_****")
		return &a
	}
	switch fault {
	case dispatchtest.FaultTransient:
		a := stripeError(503, "api_error", "", "Stripe is briefly unavailable", "Stripe-Should-Retry", "true", "Retry-After", "1")
		return &a
	case dispatchtest.FaultTerminal:
		// Began execution: cached under the key, as Stripe caches card errors.
		a := stripeError(402, "card_error", "card_declined", "Your card was declined.", "Stripe-Should-Retry", "false")
		f.store(key, r, body, a)
		return &a
	case dispatchtest.FaultHang:
		return nil
	}
	if f.script != nil {
		if a := f.script(r, []byte(body)); a != nil {
			return a
		}
	}
	if key == "" {
		a := stripeError(400, "invalid_request_error", "", "this fake wants an Idempotency-Key")
		return &a
	}
	hash := requestHash(r, body)
	f.mu.Lock()
	defer f.mu.Unlock()
	if prev, ok := f.stored[key]; ok {
		if prev.hash != hash {
			a := stripeError(400, "idempotency_error", "",
				"Keys for idempotent requests can only be used with the same parameters they were first used with. "+
					"Try using a key other than '"+key+"' if you meant to execute a different request.")
			return &a
		}
		a := prev.answer
		a.header = a.header.Clone()
		a.header.Set("Idempotent-Replayed", "true")
		return &a
	}
	f.objects++
	f.effects[key]++
	object := strings.TrimSuffix(path.Base(r.URL.Path), "s")
	a := answer{status: 200, header: http.Header{"Content-Type": {"application/json"}, "Request-Id": {"req_ok"}},
		body: fmt.Sprintf(`{"id":"obj_%d","object":%q,"livemode":false}`, f.objects, object)}
	f.stored[key] = storedAnswer{hash: hash, answer: a}
	return &a
}

func (f *fakeStripe) store(key string, r *http.Request, body string, a answer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.stored[key]; !ok && key != "" {
		f.stored[key] = storedAnswer{hash: requestHash(r, body), answer: a}
	}
}

func requestHash(r *http.Request, body string) [32]byte {
	return sha256.Sum256([]byte(r.Method + " " + r.URL.Path + "\n" + body))
}

func (f *fakeStripe) Effects(_ *testing.T, key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.effects[key]
}

func (f *fakeStripe) Inject(fault dispatchtest.Fault, n int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		f.faults = append(f.faults, fault)
	}
	return true
}

func (f *fakeStripe) seen() []seenRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seenRequest(nil), f.requests...)
}

// newTestAdapter builds an adapter on base; edit may change the config.
func newTestAdapter(t testing.TB, base string, edit func(*Config)) *Adapter {
	t.Helper()
	cfg := Config{APIKey: testAPIKey, StripeVersion: "2024-06-20", BaseURL: base}
	if edit != nil {
		edit(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}
