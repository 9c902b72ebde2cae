package mockprovider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/drainer-io/drainer/idemkey"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// answer is what a client saw for one request.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// harness serves a Provider through httptest and closes both at cleanup.
type harness struct {
	t      *testing.T
	p      *Provider
	url    string
	client *http.Client
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	p := New(cfg)
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	t.Cleanup(p.Close) // runs first: interrupts sleeping handlers
	return &harness{t: t, p: p, url: srv.URL, client: srv.Client()}
}

// do sends one request; an empty key sends no Idempotency-Key header.
func (h *harness) do(ctx context.Context, client *http.Client, path, key, tuple, body string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url+path, strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set(HeaderIdempotencyKey, key)
	}
	if tuple != "" {
		req.Header.Set(HeaderTuple, tuple)
	}
	resp, err := client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	return answer{resp.StatusCode, resp.Header, b}, nil
}

// post sends one request and fails the test on a transport error.
func (h *harness) post(path, key, body string) answer {
	h.t.Helper()
	a, err := h.do(context.Background(), h.client, path, key, "", body)
	if err != nil {
		h.t.Fatalf("POST %s: %v", path, err)
	}
	return a
}

// waitInFlight waits until a request holds key.
func waitInFlight(t *testing.T, p *Provider, key string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		rec := p.keys[key]
		held := rec != nil && rec.inFlight
		p.mu.Unlock()
		if held {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("key %q never became in flight", key)
}

func checkStatus(t *testing.T, a answer, want int) {
	t.Helper()
	if a.status != want {
		t.Fatalf("status = %d, want %d (body %s)", a.status, want, a.body)
	}
}

// checkBalanced checks that the answer classes add up to the requests.
func checkBalanced(t *testing.T, s Stats) {
	t.Helper()
	sum := s.Successes + s.Replays + s.Mismatches + s.InFlightConflicts + s.BadRequests +
		s.Terminal + s.Unavailable + s.RateLimited + s.Overloaded + s.Timeouts + s.Resets + s.Aborted
	if sum != s.Requests {
		t.Fatalf("answer classes add up to %d, want Requests = %d: %+v", sum, s.Requests, s)
	}
}

func TestSuccessBody(t *testing.T) {
	h := newHarness(t, Config{})
	a := h.post("/v1/tools/send_email", "k1", `{"to": "a@example.com", "n": [1, 2]}`)
	checkStatus(t, a, http.StatusOK)
	if ct := a.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	if a.header.Get(HeaderReplay) != "" {
		t.Errorf("first answer has %s", HeaderReplay)
	}
	var got SuccessBody
	if err := json.Unmarshal(a.body, &got); err != nil {
		t.Fatalf("body %s: %v", a.body, err)
	}
	if got.ID != ResponseID("k1") || !strings.HasPrefix(got.ID, "mock_") {
		t.Errorf("id = %q, want %q", got.ID, ResponseID("k1"))
	}
	if ResponseID("k1") == ResponseID("k2") {
		t.Error("ResponseID does not depend on the key")
	}
	if got.Tool != "send_email" {
		t.Errorf("tool = %q", got.Tool)
	}
	if string(got.Received) != `{"to":"a@example.com","n":[1,2]}` {
		t.Errorf("received = %s", got.Received)
	}
	if n := h.p.Effects("k1"); n != 1 {
		t.Errorf("Effects = %d, want 1", n)
	}
	if n := h.p.Effects("other"); n != 0 {
		t.Errorf("Effects(other) = %d, want 0", n)
	}
	s := h.p.Snapshot()
	if s.Successes != 1 || s.Effects != 1 || h.p.TotalEffects() != 1 || h.p.Requests() != 1 {
		t.Errorf("stats = %+v", s)
	}
}

func TestReplay(t *testing.T) {
	h := newHarness(t, Config{})
	const body = `{"amount":100}`
	first := h.post("/charge", "k", body)
	checkStatus(t, first, http.StatusOK)
	for i := range 3 {
		again := h.post("/charge", "k", body)
		checkStatus(t, again, http.StatusOK)
		if got := again.header.Get(HeaderReplay); got != "true" {
			t.Fatalf("replay %d: %s = %q, want true", i, HeaderReplay, got)
		}
		if !bytes.Equal(again.body, first.body) {
			t.Fatalf("replay %d body = %s, want %s", i, again.body, first.body)
		}
		if ct := again.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("replay Content-Type = %q", ct)
		}
	}
	if n := h.p.Effects("k"); n != 1 {
		t.Errorf("Effects = %d, want 1", n)
	}
	if h.p.TotalEffects() != 1 || h.p.Replays() != 3 || h.p.Requests() != 4 {
		t.Errorf("stats = %+v", h.p.Snapshot())
	}
	checkBalanced(t, h.p.Snapshot())
}

func TestPayloadMismatch(t *testing.T) {
	h := newHarness(t, Config{})
	checkStatus(t, h.post("/charge", "k", `{"amount":100}`), http.StatusOK)
	a := h.post("/charge", "k", `{"amount":200}`)
	checkStatus(t, a, http.StatusConflict)
	if got := a.header.Get(HeaderConflict); got != ConflictPayloadMismatch {
		t.Errorf("%s = %q, want %q", HeaderConflict, got, ConflictPayloadMismatch)
	}
	if ct := a.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q", ct)
	}
	if a.header.Get(HeaderReplay) != "" {
		t.Errorf("mismatch answer has %s", HeaderReplay)
	}
	if n := h.p.Effects("k"); n != 1 {
		t.Errorf("Effects = %d, want 1", n)
	}
	if s := h.p.Snapshot(); s.Mismatches != 1 || s.Replays != 0 {
		t.Errorf("stats = %+v", s)
	}
}

func TestBadRequests(t *testing.T) {
	h := newHarness(t, Config{})
	checkStatus(t, h.post("/x", "", `{}`), http.StatusBadRequest)
	checkStatus(t, h.post("/x", "k", `{not json`), http.StatusBadRequest)
	checkStatus(t, h.post("/x", "k", ``), http.StatusBadRequest)
	big := `"` + strings.Repeat("a", MaxBodyBytes) + `"`
	checkStatus(t, h.post("/x", "k", big), http.StatusRequestEntityTooLarge)
	if n := h.p.TotalEffects(); n != 0 {
		t.Errorf("TotalEffects = %d, want 0", n)
	}
	// A rejected request leaves no trace on the key.
	checkStatus(t, h.post("/x", "k", `{}`), http.StatusOK)
	s := h.p.Snapshot()
	if s.BadRequests != 4 || s.Successes != 1 {
		t.Errorf("stats = %+v", s)
	}
	checkBalanced(t, s)
}

func TestInFlightConflict(t *testing.T) {
	// The first request holds the key while it sleeps in a Timeout fault.
	h := newHarness(t, Config{Timeout: 1, TimeoutDelay: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := h.do(ctx, h.client, "/x", "k", "", `{}`)
		errc <- err
	}()
	waitInFlight(t, h.p, "k")

	a := h.post("/x", "k", `{}`)
	checkStatus(t, a, http.StatusConflict)
	if got := a.header.Get(HeaderConflict); got != "" {
		t.Errorf("in-flight 409 has %s: %q", HeaderConflict, got)
	}
	// Even a different body is an in-flight conflict, not a mismatch: nothing
	// is stored yet.
	a = h.post("/x", "k", `{"other":true}`)
	checkStatus(t, a, http.StatusConflict)
	if got := a.header.Get(HeaderConflict); got != "" {
		t.Errorf("in-flight 409 has %s: %q", HeaderConflict, got)
	}

	cancel() // the client gives up: the handler wakes and releases the key
	if err := <-errc; err == nil {
		t.Error("timed-out request got an answer")
	}
	deadline := time.Now().Add(5 * time.Second)
	for h.p.Snapshot().Timeouts != 1 {
		if time.Now().After(deadline) {
			t.Fatal("Timeout fault never finished")
		}
		time.Sleep(time.Millisecond)
	}
	s := h.p.Snapshot()
	if s.InFlightConflicts != 2 || s.Effects != 0 {
		t.Errorf("stats = %+v", s)
	}
	checkBalanced(t, s)
}

func TestConcurrentSameKey(t *testing.T) {
	h := newHarness(t, Config{})
	const n = 50
	answers := make([]answer, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			a, err := h.do(context.Background(), h.client, "/pay", "same", "", `{"amount":1}`)
			if err != nil {
				t.Error(err)
			}
			answers[i] = a
		})
	}
	close(start)
	wg.Wait()

	var fresh, replays, inFlight int
	var body []byte
	for _, a := range answers {
		switch {
		case a.status == http.StatusOK && a.header.Get(HeaderReplay) == "true":
			replays++
		case a.status == http.StatusOK:
			fresh++
			body = a.body
		case a.status == http.StatusConflict && a.header.Get(HeaderConflict) == "":
			inFlight++
		default:
			t.Errorf("unexpected answer %d %v %s", a.status, a.header, a.body)
		}
	}
	if fresh != 1 {
		t.Fatalf("%d fresh successes, want 1", fresh)
	}
	for _, a := range answers {
		if a.status == http.StatusOK && !bytes.Equal(a.body, body) {
			t.Errorf("answers differ: %s vs %s", a.body, body)
		}
	}
	if got := h.p.Effects("same"); got != 1 {
		t.Errorf("Effects = %d, want 1", got)
	}
	if d := h.p.DuplicateEffects(); len(d) != 0 {
		t.Errorf("DuplicateEffects = %v", d)
	}
	s := h.p.Snapshot()
	if s.Replays != replays || s.InFlightConflicts != inFlight || s.Requests != n {
		t.Errorf("stats = %+v, client saw %d replays, %d in-flight", s, replays, inFlight)
	}
	t.Logf("%d replays, %d in-flight conflicts", replays, inFlight)
}

func TestFailFirstN(t *testing.T) {
	h := newHarness(t, Config{FailFirstN: 3})
	for i := range 3 {
		a := h.post("/x", "a", `{}`)
		checkStatus(t, a, http.StatusServiceUnavailable)
		if h.p.Effects("a") != 0 {
			t.Fatalf("effect after failure %d", i+1)
		}
	}
	// Keys are counted separately.
	checkStatus(t, h.post("/x", "b", `{}`), http.StatusServiceUnavailable)
	checkStatus(t, h.post("/x", "a", `{}`), http.StatusOK)
	a := h.post("/x", "a", `{}`)
	checkStatus(t, a, http.StatusOK)
	if a.header.Get(HeaderReplay) != "true" {
		t.Error("fifth request is not a replay")
	}
	if h.p.Effects("a") != 1 || h.p.Effects("b") != 0 {
		t.Errorf("effects a=%d b=%d", h.p.Effects("a"), h.p.Effects("b"))
	}
	if s := h.p.Snapshot(); s.Unavailable != 4 {
		t.Errorf("stats = %+v", s)
	}
}

func TestTerminalTools(t *testing.T) {
	h := newHarness(t, Config{TerminalTools: map[string]int{"refund": 422, "send mail": 400}})
	a := h.post("/v1/tools/refund", "k", `{}`)
	checkStatus(t, a, http.StatusUnprocessableEntity)
	if ct := a.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q", ct)
	}
	checkStatus(t, h.post("/v1/tools/refund", "k", `{}`), http.StatusUnprocessableEntity)
	checkStatus(t, h.post("/v1/tools/send%20mail", "k2", `{}`), http.StatusBadRequest)
	checkStatus(t, h.post("/v1/tools/refund/", "k3", `{}`), http.StatusUnprocessableEntity)
	// The last segment names the tool, not an earlier one.
	a = h.post("/refund/charge", "k4", `{}`)
	checkStatus(t, a, http.StatusOK)
	if !strings.Contains(string(a.body), `"tool":"charge"`) {
		t.Errorf("body = %s", a.body)
	}
	if h.p.Effects("k") != 0 || h.p.TotalEffects() != 1 {
		t.Errorf("stats = %+v", h.p.Snapshot())
	}
	if s := h.p.Snapshot(); s.Terminal != 4 {
		t.Errorf("stats = %+v", s)
	}
}

func TestToolName(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"http://h/v1/tools/send_email", "send_email"},
		{"http://h/a%2Fb", "a/b"},
		{"http://h/tools/x%20y?q=1", "x y"},
		{"http://h/tools/z/", "z"},
		{"http://h/", ""},
		{"http://h", ""},
	} {
		req := httptest.NewRequest(http.MethodPost, tc.url, nil)
		if got := toolName(req.URL); got != tc.want {
			t.Errorf("toolName(%q) = %q, want %q", tc.url, got, tc.want)
		}
	}
}

func TestRetryAfterOn429(t *testing.T) {
	h := newHarness(t, Config{Fail429: 1, RetryAfterSeconds: 7})
	a := h.post("/x", "k", `{}`)
	checkStatus(t, a, http.StatusTooManyRequests)
	if got := a.header.Get("Retry-After"); got != "7" {
		t.Errorf("Retry-After = %q, want 7", got)
	}
	// 429 applies no effect and releases the key.
	checkStatus(t, h.post("/x", "k", `{}`), http.StatusTooManyRequests)
	if s := h.p.Snapshot(); s.Effects != 0 || s.RateLimited != 2 {
		t.Errorf("stats = %+v", s)
	}

	h = newHarness(t, Config{Fail429: 1, RetryAfterSeconds: -1})
	a = h.post("/x", "k", `{}`)
	checkStatus(t, a, http.StatusTooManyRequests)
	if got, ok := a.header["Retry-After"]; ok {
		t.Errorf("Retry-After = %q, want none", got)
	}
}

func TestFiveHundreds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    Config
		status int
	}{
		{"503", Config{Fail503: 1}, http.StatusServiceUnavailable},
		{"529", Config{Fail529: 1}, StatusOverloaded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.cfg)
			checkStatus(t, h.post("/x", "k", `{}`), tc.status)
			checkStatus(t, h.post("/x", "k", `{}`), tc.status)
			if n := h.p.TotalEffects(); n != 0 {
				t.Errorf("TotalEffects = %d, want 0", n)
			}
		})
		t.Run(tc.name+"/ApplyEffectBeforeFault", func(t *testing.T) {
			cfg := tc.cfg
			cfg.ApplyEffectBeforeFault = true
			h := newHarness(t, cfg)
			checkStatus(t, h.post("/x", "k", `{}`), tc.status)
			if n := h.p.Effects("k"); n != 1 {
				t.Fatalf("Effects = %d, want 1", n)
			}
			a := h.post("/x", "k", `{}`)
			checkStatus(t, a, http.StatusOK)
			if a.header.Get(HeaderReplay) != "true" {
				t.Error("retry is not a replay")
			}
			if s := h.p.Snapshot(); s.Effects != 1 || s.EffectsBeforeFault != 1 || s.Successes != 0 {
				t.Errorf("stats = %+v", s)
			}
		})
	}
}

func TestTimeout(t *testing.T) {
	h := newHarness(t, Config{Timeout: 1, TimeoutDelay: 300 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := h.do(ctx, h.client, "/x", "k", "", `{}`); err == nil {
		t.Fatal("client did not time out")
	}
	// A patient client gets the late answer.
	start := time.Now()
	a := h.post("/x", "late", `{}`)
	checkStatus(t, a, http.StatusGatewayTimeout)
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("answered after %v, before TimeoutDelay", d)
	}
	if n := h.p.TotalEffects(); n != 0 {
		t.Errorf("TotalEffects = %d, want 0", n)
	}

	h = newHarness(t, Config{Timeout: 1, TimeoutDelay: time.Minute, ApplyEffectBeforeFault: true})
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := h.do(ctx, h.client, "/x", "k", "", `{}`); err == nil {
		t.Fatal("client did not time out")
	}
	if n := h.p.Effects("k"); n != 1 {
		t.Fatalf("Effects = %d, want 1", n)
	}
	a = h.post("/x", "k", `{}`)
	checkStatus(t, a, http.StatusOK)
	if a.header.Get(HeaderReplay) != "true" {
		t.Error("retry is not a replay")
	}
}

func TestResetAfterEffect(t *testing.T) {
	h := newHarness(t, Config{ResetAfterEffect: 1})
	// A fresh connection per request: Go's transport silently retries a
	// request with an Idempotency-Key once when a reused connection dies.
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	a, err := h.do(context.Background(), client, "/x", "k", "", `{"v":1}`)
	if err == nil {
		t.Fatalf("got an answer %d %s, want a closed connection", a.status, a.body)
	}
	if n := h.p.Effects("k"); n != 1 {
		t.Fatalf("Effects = %d, want 1", n)
	}
	a, err = h.do(context.Background(), client, "/x", "k", "", `{"v":1}`)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	checkStatus(t, a, http.StatusOK)
	if a.header.Get(HeaderReplay) != "true" {
		t.Error("retry is not a replay")
	}
	want := successBody("k", "x", []byte(`{"v":1}`))
	if !bytes.Equal(a.body, want) {
		t.Errorf("replayed body = %s, want %s", a.body, want)
	}
	s := h.p.Snapshot()
	if s.Resets != 1 || s.Effects != 1 || s.Replays != 1 || s.Successes != 0 {
		t.Errorf("stats = %+v", s)
	}
	checkBalanced(t, s)
}

// TestLoseAnswer: a listed key loses the answer of the request that
// applied its effect, once; the retry is a replay; other keys are untouched.
func TestLoseAnswer(t *testing.T) {
	h := newHarness(t, Config{LoseAnswer: map[string]bool{"k": true}, FailFirstN: 1})
	tr := &http.Transport{DisableKeepAlives: true} // see TestResetAfterEffect
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	// A failure before the effect loses nothing: the answer is lost by the
	// request that applies the effect.
	a, err := h.do(context.Background(), client, "/x", "k", "", `{"v":1}`)
	if err != nil {
		t.Fatal(err)
	}
	checkStatus(t, a, http.StatusServiceUnavailable)
	if _, err := h.do(context.Background(), client, "/x", "k", "", `{"v":1}`); err == nil {
		t.Fatal("the request that applied the effect got an answer, want a closed connection")
	}
	for range 2 {
		a, err = h.do(context.Background(), client, "/x", "k", "", `{"v":1}`)
		if err != nil {
			t.Fatalf("retry: %v", err)
		}
		checkStatus(t, a, http.StatusOK)
		if a.header.Get(HeaderReplay) != "true" {
			t.Error("retry is not a replay")
		}
	}
	checkStatus(t, h.post("/x", "other", `{}`), http.StatusServiceUnavailable)
	if a := h.post("/x", "other", `{}`); a.status != http.StatusOK || a.header.Get(HeaderReplay) == "true" {
		t.Fatalf("unlisted key: %d replay=%q", a.status, a.header.Get(HeaderReplay))
	}
	s := h.p.Snapshot()
	if s.Resets != 1 || s.Effects != 2 || s.Replays != 2 || s.Successes != 1 {
		t.Errorf("stats = %+v", s)
	}
	checkBalanced(t, s)
}

func TestKeysForTuple(t *testing.T) {
	h := newHarness(t, Config{})
	for _, k := range []string{"k1", "k2", "k1"} {
		if _, err := h.do(context.Background(), h.client, "/x", k, "dHVwbGU", `{}`); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.do(context.Background(), h.client, "/x", "k3", "b3RoZXI", `{}`); err != nil {
		t.Fatal(err)
	}
	if got := h.p.KeysForTuple("dHVwbGU"); !slices.Equal(got, []string{"k1", "k2"}) {
		t.Errorf("KeysForTuple = %v, want [k1 k2]", got)
	}
	if got := h.p.KeysForTuple("b3RoZXI"); !slices.Equal(got, []string{"k3"}) {
		t.Errorf("KeysForTuple = %v, want [k3]", got)
	}
	if got := h.p.KeysForTuple("unseen"); len(got) != 0 {
		t.Errorf("KeysForTuple(unseen) = %v", got)
	}
	if got := h.p.MultiKeyTuples(); !slices.Equal(got, []string{"dHVwbGU"}) {
		t.Errorf("MultiKeyTuples = %v", got)
	}
	// The result is a copy.
	got := h.p.KeysForTuple("dHVwbGU")
	got[0] = "changed"
	if h.p.KeysForTuple("dHVwbGU")[0] != "k1" {
		t.Error("KeysForTuple returns the internal slice")
	}
}

func TestVerifyTuple(t *testing.T) {
	h := newHarness(t, Config{VerifyTuple: true})
	tup := idemkey.Tuple{AgentRunID: "run", StepID: "s1", ToolName: "charge"}
	send := func(key, tuple string) answer {
		t.Helper()
		a, err := h.do(context.Background(), h.client, "/charge", key, tuple, `{}`)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	checkStatus(t, send(tup.Key(), tup.Encoded()), http.StatusOK)
	checkStatus(t, send("idem_v1_00000000000000000000000000000000", tup.Encoded()), http.StatusBadRequest)
	checkStatus(t, send(tup.Key(), ""), http.StatusBadRequest)
	checkStatus(t, send(tup.Key(), tup.Encoded()+"="), http.StatusBadRequest)
	// Mismatched keys are still recorded against their tuple.
	if got := h.p.KeysForTuple(tup.Encoded()); len(got) != 2 {
		t.Errorf("KeysForTuple = %v", got)
	}
}

func TestLatency(t *testing.T) {
	h := newHarness(t, Config{Latency: 100 * time.Millisecond})
	start := time.Now()
	checkStatus(t, h.post("/x", "k", `{}`), http.StatusOK)
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("answered after %v, want at least 100ms", d)
	}
	// A client that leaves during the latency is not processed.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := h.do(ctx, h.client, "/x", "gone", "", `{}`); err == nil {
		t.Fatal("client did not time out")
	}
	deadline := time.Now().Add(5 * time.Second)
	for h.p.Snapshot().Aborted != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("stats = %+v, want Aborted = 1", h.p.Snapshot())
		}
		time.Sleep(time.Millisecond)
	}
	if h.p.Effects("gone") != 0 {
		t.Error("aborted request applied its effect")
	}
}

func TestPickFault(t *testing.T) {
	cfg := Config{Seed: 42, Fail503: 0.1, Fail429: 0.2, Fail529: 0.05, Timeout: 0.05, ResetAfterEffect: 0.1}
	p, q := New(cfg), New(cfg)
	const n = 20000
	counts := map[fault]int{}
	for i := range n {
		key := fmt.Sprintf("key-%d", i)
		f := p.pickFault(key, 1+i%3)
		if g := q.pickFault(key, 1+i%3); g != f {
			t.Fatalf("same seed, different choice for %s: %d vs %d", key, f, g)
		}
		counts[f]++
	}
	for f, rate := range map[fault]float64{
		faultNone: 0.5, fault503: 0.1, fault429: 0.2, fault529: 0.05, faultTimeout: 0.05, faultReset: 0.1,
	} {
		got := float64(counts[f]) / n
		if math.Abs(got-rate) > 0.015 {
			t.Errorf("fault %d drawn at rate %.3f, want %.3f", f, got, rate)
		}
	}

	other := New(Config{Seed: 43, Fail503: 0.5})
	same := New(Config{Seed: 42, Fail503: 0.5})
	differ := 0
	for i := range 1000 {
		key := fmt.Sprintf("key-%d", i)
		if other.pickFault(key, 1) != same.pickFault(key, 1) {
			differ++
		}
	}
	if differ < 300 {
		t.Errorf("seeds 42 and 43 differ on only %d of 1000 draws", differ)
	}

	// Rates are clamped; the sum may exceed 1.
	all := New(Config{Fail503: 7, Fail429: 1})
	for i := range 100 {
		if f := all.pickFault(fmt.Sprint(i), 1); f != fault503 {
			t.Fatalf("Fail503 = 7 drew fault %d", f)
		}
	}
}

func TestNewPanicsOnBadStatus(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New accepted status 42")
		}
	}()
	New(Config{TerminalTools: map[string]int{"x": 42}})
}

func TestStartClose(t *testing.T) {
	p := New(Config{Timeout: 1, TimeoutDelay: time.Hour})
	url, err := p.Start("")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Errorf("url = %q", url)
	}
	if _, err := p.Start(""); err == nil {
		t.Error("second Start succeeded")
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	// A handler sleeping in a Timeout fault must not hold Close up.
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, url+"/x", strings.NewReader(`{}`))
		req.Header.Set(HeaderIdempotencyKey, "k")
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	waitInFlight(t, p, "k")
	start := time.Now()
	p.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
	<-errc
	p.Close() // idempotent
	if _, err := p.Start(""); err == nil {
		t.Error("Start after Close succeeded")
	}
	if _, err := client.Post(url+"/x", "application/json", strings.NewReader(`{}`)); err == nil {
		t.Error("server still answers after Close")
	}
}

func TestStartBadAddr(t *testing.T) {
	p := New(Config{})
	defer p.Close()
	if _, err := p.Start("256.0.0.1:bad"); err == nil {
		t.Error("Start accepted a bad address")
	}
}

// TestStress drives many keys through every fault with retrying clients and
// checks that each key ends with exactly one effect.
func TestStress(t *testing.T) {
	h := newHarness(t, Config{
		Seed: 7, Fail503: 0.1, Fail429: 0.1, Fail529: 0.05, Timeout: 0.05, ResetAfterEffect: 0.1,
		RetryAfterSeconds: 0, TimeoutDelay: 200 * time.Millisecond, FailFirstN: 1,
		ApplyEffectBeforeFault: true,
	})
	tr := &http.Transport{DisableKeepAlives: true, MaxConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	// The first attempts give up after 50ms (so some leave during a Timeout
	// fault); later ones wait longer, so a busy machine still gets answers.
	// The only bound is wall time, generous enough for any machine.
	clients := []*http.Client{
		{Transport: tr, Timeout: 50 * time.Millisecond},
		{Transport: tr, Timeout: 2 * time.Second},
	}
	deadline := time.Now().Add(2 * time.Minute)

	const keys, senders = 200, 3 // every key is sent by three "replicas" at once
	var wg sync.WaitGroup
	for k := range keys {
		key := fmt.Sprintf("idem-%03d", k)
		body := fmt.Sprintf(`{"row":%d}`, k)
		for range senders {
			wg.Go(func() {
				for attempt := 0; ; attempt++ {
					if time.Now().After(deadline) {
						t.Errorf("%s: no success after %d attempts", key, attempt)
						return
					}
					client := clients[min(attempt/20, 1)]
					a, err := h.do(context.Background(), client, "/tool", key, "t-"+key, body)
					if err == nil && a.status == http.StatusOK {
						return
					}
					if err == nil && a.header.Get(HeaderConflict) != "" {
						t.Errorf("%s: payload mismatch with one body", key)
						return
					}
				}
			})
		}
	}
	wg.Wait()

	for k := range keys {
		key := fmt.Sprintf("idem-%03d", k)
		if n := h.p.Effects(key); n != 1 {
			t.Errorf("Effects(%s) = %d, want 1", key, n)
		}
	}
	if d := h.p.DuplicateEffects(); len(d) != 0 {
		t.Errorf("DuplicateEffects = %v", d)
	}
	if m := h.p.MultiKeyTuples(); len(m) != 0 {
		t.Errorf("MultiKeyTuples = %v", m)
	}
	if n := h.p.TotalEffects(); n != keys {
		t.Errorf("TotalEffects = %d, want %d", n, keys)
	}
	// Wait for handlers still sleeping after their client gave up.
	h.p.Close()
	deadline = time.Now().Add(30 * time.Second)
	for {
		s := h.p.Snapshot()
		sum := s.Successes + s.Replays + s.Mismatches + s.InFlightConflicts + s.BadRequests +
			s.Terminal + s.Unavailable + s.RateLimited + s.Overloaded + s.Timeouts + s.Resets + s.Aborted
		if sum == s.Requests {
			break
		}
		if time.Now().After(deadline) {
			checkBalanced(t, s)
			break
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("%+v", h.p.Snapshot())
}
