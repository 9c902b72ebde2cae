package webhook

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/outbox"
)

// Values that must never appear in Result.Err.
const (
	headerSecret  = "s3cr3t-header-value"
	querySecret   = "s3cr3t-query-value"
	payloadSecret = "s3cr3t-payload-value"
)

var testPayload = `{"amount":500,"currency":"eur","note":"` + payloadSecret + `"}`

func testMessage(payload string) *dispatch.Message {
	tuple := idemkey.Tuple{AgentRunID: "run-1", StepID: "step-1", ToolName: "charge_card", BusinessScope: "acct-9"}
	return &dispatch.Message{
		Key: tuple.Key(), Tuple: tuple, Kind: outbox.KindForward,
		Payload: json.RawMessage(payload), Attempt: 1, Seq: 1,
	}
}

// answer is a scripted reply of the provider.
type answer struct {
	status int
	header http.Header
	body   string
}

// seen is a request as the provider received it.
type seen struct {
	method, uri string
	header      http.Header
	body        []byte
}

// provider is an in-process upstream that honours idempotency keys the way
// Stripe does: a request repeating a key with the same body gets the first
// 2xx answer again plus Idempotency-Replay: true; the same key with another
// body gets 409 Idempotency-Conflict: payload-mismatch. New keys get the
// scripted answer, or raw handles the request when set (hangs, aborts).
type provider struct {
	srv    *httptest.Server
	answer func(r *http.Request) answer
	raw    http.HandlerFunc
	// release unblocks handlers that wait, before the server closes.
	release chan struct{}

	mu       sync.Mutex
	requests []seen
	stored   map[string]storedAnswer
}

type storedAnswer struct {
	requestBody []byte
	answer      answer
}

func newProvider(t *testing.T, fn func(r *http.Request) answer) *provider {
	t.Helper()
	p := &provider{answer: fn, release: make(chan struct{}), stored: map[string]storedAnswer{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	t.Cleanup(func() { close(p.release) }) // runs first: handlers return, then Close returns
	return p
}

func (p *provider) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	key := r.Header.Get("Idempotency-Key")
	p.mu.Lock()
	p.requests = append(p.requests, seen{method: r.Method, uri: r.RequestURI, header: r.Header.Clone(), body: body})
	prev, replay := p.stored[key]
	p.mu.Unlock()
	if p.raw != nil {
		p.raw(w, r)
		return
	}
	var a answer
	switch {
	case replay && !bytes.Equal(prev.requestBody, body):
		a = answer{status: http.StatusConflict, header: http.Header{"Idempotency-Conflict": {"payload-mismatch"}},
			body: `{"error":"key reused with another payload"}`}
	case replay:
		a = prev.answer
		a.header = a.header.Clone()
		if a.header == nil {
			a.header = http.Header{}
		}
		a.header.Set("Idempotency-Replay", "true")
	default:
		a = p.answer(r)
		if a.status >= 200 && a.status <= 299 {
			p.mu.Lock()
			p.stored[key] = storedAnswer{requestBody: body, answer: a}
			p.mu.Unlock()
		}
	}
	for k, v := range a.header {
		w.Header()[k] = v
	}
	w.WriteHeader(a.status)
	io.WriteString(w, a.body)
}

func (p *provider) seen() []seen {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]seen(nil), p.requests...)
}

// wait blocks until the client goes away or the test ends.
func (p *provider) wait(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-p.release:
	}
}

func newTestAdapter(t *testing.T, baseURL string, edit func(*Config)) *Adapter {
	t.Helper()
	cfg := Config{
		URL:     baseURL + "/v1/{tool_name}?sig=" + querySecret,
		Headers: map[string]string{"Authorization": "Bearer " + headerSecret, "X-Tenant": "acme"},
		Timeout: 5 * time.Second,
	}
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

// assertRedacted fails if r.Err reveals a header value, the URL's query or the payload.
func assertRedacted(t *testing.T, r dispatch.Result) {
	t.Helper()
	if r.Err == nil {
		return
	}
	msg := r.Err.Error()
	for _, s := range []string{headerSecret, querySecret, payloadSecret, "sig="} {
		if strings.Contains(msg, s) {
			t.Errorf("Result.Err reveals %q: %s", s, msg)
		}
	}
}

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// TestDispatchClasses runs every row of the class table of docs/reference.md §5.
func TestDispatchClasses(t *testing.T) {
	inTwoMinutes := func() string { return time.Now().Add(2 * time.Minute).UTC().Format(http.TimeFormat) }
	jsonCT := hdr("Content-Type", "application/json")
	tests := []struct {
		name       string
		answer     answer
		outcome    dispatch.Outcome
		reason     string
		retryAfter [2]time.Duration // accepted range
		response   string           // stored response; "" means none
		problem    *dispatch.Problem
		errHas     []string
	}{
		{name: "200 json", answer: answer{200, jsonCT, `{"id":"ch_1"}`},
			outcome: dispatch.Success, reason: "http_2xx", response: `{"id":"ch_1"}`},
		{name: "201 text", answer: answer{201, hdr("Content-Type", "text/plain"), "created"},
			outcome: dispatch.Success, reason: "http_2xx", response: `{"body":"created","truncated":false}`},
		{name: "204 empty", answer: answer{204, nil, ""},
			outcome: dispatch.Success, reason: "http_2xx", response: `{"body":"","truncated":false}`},
		{name: "200 garbage body", answer: answer{200, hdr("Content-Type", "text/html"), "<html>\xff\x00 oops"},
			outcome: dispatch.Success, reason: "http_2xx", response: "{\"body\":\"<html>\ufffd\ufffd oops\",\"truncated\":false}"},
		{name: "200 Idempotent-Replayed", answer: answer{200, hdr("Content-Type", "application/json", "Idempotent-Replayed", "True"), `{"id":"ch_1"}`},
			outcome: dispatch.Replay, reason: "replay", response: `{"id":"ch_1"}`},
		{name: "409 payload mismatch", answer: answer{409, hdr("Idempotency-Conflict", "payload-mismatch"), ""},
			outcome: dispatch.Terminal, reason: "payload_mismatch", errHas: []string{"http 409 Conflict"}},
		{name: "409 in flight", answer: answer{409, hdr("Retry-After", "2"), "in progress"},
			outcome: dispatch.Retry, reason: "in_flight_upstream", retryAfter: [2]time.Duration{2 * time.Second, 2 * time.Second},
			errHas: []string{`http 409 Conflict: body "in progress"`}},
		{name: "425", answer: answer{425, nil, ""}, outcome: dispatch.Retry, reason: "in_flight_upstream", errHas: []string{"http 425 Too Early"}},
		{name: "408", answer: answer{408, nil, ""}, outcome: dispatch.Retry, reason: "http_408", errHas: []string{"http 408"}},
		{name: "429 retry-after seconds", answer: answer{429, hdr("Retry-After", "7"), ""},
			outcome: dispatch.Retry, reason: "http_429", retryAfter: [2]time.Duration{7 * time.Second, 7 * time.Second}, errHas: []string{"http 429"}},
		{name: "429 retry-after garbage", answer: answer{429, hdr("Retry-After", "soon"), ""},
			outcome: dispatch.Retry, reason: "http_429", errHas: []string{"http 429"}},
		{name: "503 retry-after date", answer: answer{503, hdr("Retry-After", inTwoMinutes()), ""},
			outcome: dispatch.Retry, reason: "http_5xx", retryAfter: [2]time.Duration{110 * time.Second, 120 * time.Second},
			errHas: []string{"http 503 Service Unavailable"}},
		{name: "500", answer: answer{500, hdr("Content-Type", "text/plain"), "database down"},
			outcome: dispatch.Retry, reason: "http_5xx", errHas: []string{`http 500 Internal Server Error: body "database down"`}},
		{name: "502", answer: answer{502, nil, ""}, outcome: dispatch.Retry, reason: "http_5xx", errHas: []string{"http 502"}},
		{name: "529", answer: answer{529, hdr("Retry-After", "30"), `{"error":"overloaded"}`},
			outcome: dispatch.Retry, reason: "http_529", retryAfter: [2]time.Duration{30 * time.Second, 30 * time.Second}, errHas: []string{"http 529"}},
		{name: "401", answer: answer{401, hdr("WWW-Authenticate", "Bearer"), ""}, outcome: dispatch.Auth, reason: "auth", errHas: []string{"http 401 Unauthorized"}},
		{name: "403", answer: answer{403, nil, "forbidden"}, outcome: dispatch.Auth, reason: "auth", errHas: []string{"http 403 Forbidden"}},
		{name: "407", answer: answer{407, nil, ""}, outcome: dispatch.Auth, reason: "auth", errHas: []string{"http 407"}},
		{name: "400 garbage", answer: answer{400, hdr("Content-Type", "text/html"), "<h1>Bad\nRequest</h1>"},
			outcome: dispatch.Terminal, reason: "http_4xx", errHas: []string{`http 400 Bad Request: body "<h1>Bad Request</h1>"`}},
		{name: "400 with retry-after", answer: answer{400, hdr("Retry-After", "5"), ""},
			outcome: dispatch.Terminal, reason: "http_4xx", errHas: []string{"http 400"}},
		{name: "404", answer: answer{404, nil, ""}, outcome: dispatch.Terminal, reason: "http_4xx", errHas: []string{"http 404 Not Found"}},
		{name: "422 problem+json", answer: answer{422, hdr("Content-Type", "application/problem+json; charset=utf-8"),
			`{"type":"https://example.com/probs/amount","title":"Invalid amount","status":422,"detail":"amount must be below 100","instance":"/charges/1","code":7}`},
			outcome: dispatch.Terminal, reason: "http_4xx",
			problem: &dispatch.Problem{Type: "https://example.com/probs/amount", Title: "Invalid amount", Status: 422,
				Detail: "amount must be below 100", Instance: "/charges/1"},
			errHas: []string{"http 422 Unprocessable Entity: Invalid amount: amount must be below 100 (type=https://example.com/probs/amount, instance=/charges/1)"}},
		{name: "503 problem+json", answer: answer{503, hdr("Content-Type", "application/problem+json"), `{"title":"Maintenance","status":"soon"}`},
			outcome: dispatch.Retry, reason: "http_5xx", problem: &dispatch.Problem{Title: "Maintenance"}, errHas: []string{"Maintenance"}},
		{name: "302", answer: answer{302, hdr("Location", "/elsewhere"), ""}, outcome: dispatch.Terminal, reason: "redirect", errHas: []string{"http 302 Found"}},
		{name: "600", answer: answer{600, nil, ""}, outcome: dispatch.Terminal, reason: "http_unexpected", errHas: []string{"http 600"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newProvider(t, func(*http.Request) answer { return tt.answer })
			a := newTestAdapter(t, p.srv.URL, nil)
			r := a.Dispatch(t.Context(), testMessage(testPayload))
			assertRedacted(t, r)

			if r.Outcome != tt.outcome || r.Reason != tt.reason || r.Status != tt.answer.status || r.NotSent {
				t.Errorf("got %v %q status %d NotSent %v; want %v %q status %d",
					r.Outcome, r.Reason, r.Status, r.NotSent, tt.outcome, tt.reason, tt.answer.status)
			}
			if r.RetryAfter < tt.retryAfter[0] || r.RetryAfter > tt.retryAfter[1] {
				t.Errorf("RetryAfter = %v, want in %v", r.RetryAfter, tt.retryAfter)
			}
			if string(r.Response) != tt.response {
				t.Errorf("Response = %s, want %s", r.Response, tt.response)
			}
			if (r.Problem == nil) != (tt.problem == nil) || (r.Problem != nil && *r.Problem != *tt.problem) {
				t.Errorf("Problem = %+v, want %+v", r.Problem, tt.problem)
			}
			if r.Succeeded() != (r.Err == nil) {
				t.Errorf("Succeeded %v but Err = %v", r.Succeeded(), r.Err)
			}
			for _, s := range tt.errHas {
				if r.Err == nil || !strings.Contains(r.Err.Error(), s) {
					t.Errorf("Err = %v, want it to contain %q", r.Err, s)
				}
			}
			if he, ok := errors.AsType[*dispatch.HTTPError](r.Err); r.Err != nil && (!ok || he.Status != tt.answer.status) {
				t.Errorf("Err = %#v, want a *dispatch.HTTPError with the status", r.Err)
			}
			if n := len(p.seen()); n != 1 {
				t.Errorf("provider saw %d requests, want 1", n)
			}
		})
	}
}

func TestDispatchReplayAndMismatch(t *testing.T) {
	p := newProvider(t, func(*http.Request) answer {
		return answer{201, hdr("Content-Type", "application/json"), `{"id":"ch_1","amount":500}`}
	})
	a := newTestAdapter(t, p.srv.URL, nil)
	m := testMessage(testPayload)

	first := a.Dispatch(t.Context(), m)
	if first.Outcome != dispatch.Success || first.Reason != "http_2xx" {
		t.Fatalf("first attempt: %+v", first)
	}
	second := a.Dispatch(t.Context(), m)
	if second.Outcome != dispatch.Replay || second.Reason != "replay" || second.Status != 201 || !second.Succeeded() {
		t.Errorf("second attempt: %+v", second)
	}
	if string(second.Response) != string(first.Response) {
		t.Errorf("replayed response %s, first %s", second.Response, first.Response)
	}

	changed := testMessage(`{"amount":999,"note":"` + payloadSecret + `"}`)
	mismatch := a.Dispatch(t.Context(), changed)
	assertRedacted(t, mismatch)
	if mismatch.Outcome != dispatch.Terminal || mismatch.Reason != "payload_mismatch" || mismatch.Status != 409 || mismatch.Response != nil {
		t.Errorf("same key, other payload: %+v", mismatch)
	}

	reqs := p.seen()
	if len(reqs) != 3 {
		t.Fatalf("provider saw %d requests, want 3", len(reqs))
	}
	for i, r := range reqs {
		if got := r.header.Get("Idempotency-Key"); got != m.Key {
			t.Errorf("request %d: Idempotency-Key %q, want %q on every attempt", i, got, m.Key)
		}
	}
}

func TestDispatchRequest(t *testing.T) {
	p := newProvider(t, func(*http.Request) answer { return answer{200, nil, ""} })
	a := newTestAdapter(t, p.srv.URL, func(c *Config) { c.UserAgent = "drainer/v1.2.3" })
	m := testMessage(testPayload)
	m.Traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if r := a.Dispatch(t.Context(), m); r.Outcome != dispatch.Success {
		t.Fatalf("Dispatch: %+v", r)
	}
	req := p.seen()[0]

	if req.method != http.MethodPost {
		t.Errorf("method %s, want POST", req.method)
	}
	if want := "/v1/charge_card?sig=" + querySecret; req.uri != want {
		t.Errorf("request URI %q, want %q", req.uri, want)
	}
	if string(req.body) != testPayload {
		t.Errorf("body %q, want the payload as-is", req.body)
	}
	want := map[string]string{
		"Content-Type":              "application/json",
		"Idempotency-Key":           m.Key,
		"X-Agent-Idempotency-Tuple": m.Tuple.Encoded(),
		"Traceparent":               m.Traceparent,
		"User-Agent":                "drainer/v1.2.3",
		"Authorization":             "Bearer " + headerSecret,
		"X-Tenant":                  "acme",
		"Accept-Encoding":           "gzip", // added by net/http
		"Content-Length":            fmt.Sprint(len(testPayload)),
	}
	for name, values := range req.header {
		w, ok := want[name]
		if !ok {
			t.Errorf("unexpected header %s: %q", name, values)
		} else if len(values) != 1 || values[0] != w {
			t.Errorf("header %s = %q, want exactly %q", name, values, w)
		}
	}
	for name := range want {
		if _, ok := req.header[name]; !ok {
			t.Errorf("header %s missing", name)
		}
	}
	canonical, err := base64.RawURLEncoding.DecodeString(req.header.Get("X-Agent-Idempotency-Tuple"))
	if err != nil || !bytes.Equal(canonical, m.Tuple.Canonical()) {
		t.Errorf("tuple header decodes to %q (%v), want %q", canonical, err, m.Tuple.Canonical())
	}
	if m.Tuple.Key() != req.header.Get("Idempotency-Key") {
		t.Error("key does not match the tuple")
	}
}

func TestDispatchDefaultUserAgentAndTraceparent(t *testing.T) {
	p := newProvider(t, func(*http.Request) answer { return answer{200, nil, ""} })
	a := newTestAdapter(t, p.srv.URL, nil)
	for _, tp := range []string{"", "00-bad", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\nX-Evil: 1"} {
		m := testMessage(testPayload)
		m.Traceparent = tp
		if r := a.Dispatch(t.Context(), m); !r.Succeeded() {
			t.Fatalf("traceparent %q: %+v", tp, r)
		}
	}
	for _, req := range p.seen() {
		if tp, ok := req.header["Traceparent"]; ok {
			t.Errorf("invalid traceparent sent: %q", tp)
		}
		if _, ok := req.header["X-Evil"]; ok {
			t.Error("header injected through the traceparent")
		}
		if ua := req.header.Get("User-Agent"); !strings.HasPrefix(ua, "drainer/") {
			t.Errorf("User-Agent %q", ua)
		}
	}
}

func TestDispatchToolNameEscaping(t *testing.T) {
	tests := []struct{ tool, path string }{
		{"charge_card", "/v1/charge_card"},
		{"a/b c", "/v1/a%2Fb%20c"},
		{"../admin", "/v1/..%2Fadmin"},
		{"x?y#z", "/v1/x%3Fy%23z"},
		{"é", "/v1/%C3%A9"},
	}
	p := newProvider(t, func(*http.Request) answer { return answer{200, nil, ""} })
	a := newTestAdapter(t, p.srv.URL, func(c *Config) { c.URL = p.srv.URL + "/v1/{tool_name}?tool={tool_name}" })
	for _, tt := range tests {
		m := testMessage(testPayload)
		m.Tuple.ToolName = tt.tool
		m.Key = m.Tuple.Key()
		if r := a.Dispatch(t.Context(), m); r.Outcome != dispatch.Success {
			t.Fatalf("tool %q: %+v", tt.tool, r)
		}
	}
	for i, req := range p.seen() {
		want := tests[i].path + "?tool=" + strings.TrimPrefix(tests[i].path, "/v1/")
		if req.uri != want {
			t.Errorf("tool %q: request URI %q, want %q", tests[i].tool, req.uri, want)
		}
	}
}

func TestDispatchRedirectNotFollowed(t *testing.T) {
	for _, status := range []int{301, 302, 303, 307, 308} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			var hits sync.Map
			target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Store(r.URL.Path, true)
			}))
			t.Cleanup(target.Close)
			p := newProvider(t, func(*http.Request) answer {
				return answer{status, hdr("Location", target.URL+"/stolen"), "moved"}
			})
			a := newTestAdapter(t, p.srv.URL, nil)
			r := a.Dispatch(t.Context(), testMessage(testPayload))
			assertRedacted(t, r)
			if r.Outcome != dispatch.Terminal || r.Reason != "redirect" || r.Status != status || r.Err == nil {
				t.Errorf("got %+v", r)
			}
			if _, hit := hits.Load("/stolen"); hit {
				t.Error("the redirect target was requested")
			}
		})
	}
}

func TestDispatchTimeout(t *testing.T) {
	t.Run("adapter timeout", func(t *testing.T) {
		p := newProvider(t, nil)
		p.raw = func(w http.ResponseWriter, r *http.Request) { p.wait(r) }
		a := newTestAdapter(t, p.srv.URL, func(c *Config) { c.Timeout = 200 * time.Millisecond })
		start := time.Now()
		r := a.Dispatch(t.Context(), testMessage(testPayload))
		assertRedacted(t, r)
		if r.Outcome != dispatch.Ambiguous || r.Reason != "timeout" || r.NotSent || r.Status != 0 {
			t.Errorf("got %+v", r)
		}
		if !errors.Is(r.Err, context.DeadlineExceeded) {
			t.Errorf("Err = %v, want DeadlineExceeded", r.Err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("took %v", d)
		}
	})
	t.Run("context deadline shorter", func(t *testing.T) {
		p := newProvider(t, nil)
		p.raw = func(w http.ResponseWriter, r *http.Request) { p.wait(r) }
		a := newTestAdapter(t, p.srv.URL, func(c *Config) { c.Timeout = time.Minute })
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		r := a.Dispatch(ctx, testMessage(testPayload))
		if r.Outcome != dispatch.Ambiguous || r.Reason != "timeout" || r.NotSent {
			t.Errorf("got %+v", r)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("took %v: the context deadline was not honoured", d)
		}
	})
	t.Run("body too slow", func(t *testing.T) {
		p := newProvider(t, nil)
		p.raw = func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(200)
			io.WriteString(w, `{"id":`)
			w.(http.Flusher).Flush()
			p.wait(r)
		}
		a := newTestAdapter(t, p.srv.URL, func(c *Config) { c.Timeout = 200 * time.Millisecond })
		r := a.Dispatch(t.Context(), testMessage(testPayload))
		assertRedacted(t, r)
		if r.Outcome != dispatch.Ambiguous || r.Reason != "timeout" || r.Status != 200 || r.Response != nil {
			t.Errorf("2xx with a body cut by the timeout: %+v", r)
		}
	})
}

func TestDispatchCancelled(t *testing.T) {
	t.Run("after send", func(t *testing.T) {
		received := make(chan struct{})
		p := newProvider(t, nil)
		p.raw = func(w http.ResponseWriter, r *http.Request) {
			close(received)
			p.wait(r)
		}
		a := newTestAdapter(t, p.srv.URL, nil)
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			<-received
			cancel()
		}()
		r := a.Dispatch(ctx, testMessage(testPayload))
		assertRedacted(t, r)
		if r.Outcome != dispatch.Ambiguous || r.Reason != "cancelled" || r.NotSent {
			t.Errorf("got %+v", r)
		}
		if !errors.Is(r.Err, context.Canceled) {
			t.Errorf("Err = %v, want one wrapping context.Canceled", r.Err)
		}
	})
	t.Run("before send", func(t *testing.T) {
		p := newProvider(t, func(*http.Request) answer { return answer{200, nil, ""} })
		a := newTestAdapter(t, p.srv.URL, nil)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		r := a.Dispatch(ctx, testMessage(testPayload))
		if r.Outcome != dispatch.Retry || r.Reason != "cancelled" || !r.NotSent || !errors.Is(r.Err, context.Canceled) {
			t.Errorf("got %+v", r)
		}
		if n := len(p.seen()); n != 0 {
			t.Errorf("provider saw %d requests", n)
		}
	})
}

func TestDispatchConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	a := newTestAdapter(t, "http://"+addr, nil)
	r := a.Dispatch(t.Context(), testMessage(testPayload))
	assertRedacted(t, r)
	if r.Outcome != dispatch.Retry || r.Reason != "connect" || !r.NotSent || r.Status != 0 || r.Err == nil {
		t.Errorf("got %+v", r)
	}
}

func TestDispatchConnectionLost(t *testing.T) {
	t.Run("before the answer", func(t *testing.T) {
		p := newProvider(t, nil)
		p.raw = func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		}
		a := newTestAdapter(t, p.srv.URL, nil)
		r := a.Dispatch(t.Context(), testMessage(testPayload))
		assertRedacted(t, r)
		if r.Outcome != dispatch.Ambiguous || r.Reason != "connection" || r.NotSent || r.Err == nil {
			t.Errorf("got %+v", r)
		}
	})
	t.Run("during a 2xx body", func(t *testing.T) {
		p := newProvider(t, nil)
		p.raw = func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "1000")
			w.WriteHeader(200)
			io.WriteString(w, `{"id":"ch_1"`)
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // drops the connection mid-body
		}
		a := newTestAdapter(t, p.srv.URL, nil)
		r := a.Dispatch(t.Context(), testMessage(testPayload))
		assertRedacted(t, r)
		if r.Outcome != dispatch.Ambiguous || r.Reason != "connection" || r.Status != 200 || r.Response != nil || r.NotSent {
			t.Errorf("got %+v", r)
		}
		if r.Err == nil || !strings.Contains(r.Err.Error(), "http 200 answer cut off") {
			t.Errorf("Err = %v", r.Err)
		}
	})
	t.Run("during an error body", func(t *testing.T) {
		p := newProvider(t, nil)
		p.raw = func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "1000")
			w.WriteHeader(503)
			io.WriteString(w, "overloa")
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
		a := newTestAdapter(t, p.srv.URL, nil)
		r := a.Dispatch(t.Context(), testMessage(testPayload))
		if r.Outcome != dispatch.Retry || r.Reason != "http_5xx" || r.Status != 503 {
			t.Errorf("the status decides a non-2xx answer: %+v", r)
		}
	})
}

func TestDispatchHugeBody(t *testing.T) {
	const huge = 10 << 20
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	serveHuge := func(status int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(status)
			for written := 0; written < huge; written += len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return // the client stopped reading
				}
			}
		}
	}
	t.Run("success stored truncated", func(t *testing.T) {
		p := newProvider(t, nil)
		p.raw = serveHuge(200)
		a := newTestAdapter(t, p.srv.URL, nil)
		r := a.Dispatch(t.Context(), testMessage(testPayload))
		if r.Outcome != dispatch.Success || len(r.Response) > dispatch.DefaultResponseLimit+32 {
			t.Fatalf("got %v with a %d-byte response", r.Outcome, len(r.Response))
		}
		var stored struct {
			Body      string `json:"body"`
			Truncated bool   `json:"truncated"`
		}
		if err := json.Unmarshal(r.Response, &stored); err != nil || !stored.Truncated || len(stored.Body) != dispatch.DefaultResponseLimit {
			t.Errorf("stored body of %d bytes, truncated %v, err %v", len(stored.Body), stored.Truncated, err)
		}
	})
	t.Run("error excerpt bounded", func(t *testing.T) {
		p := newProvider(t, nil)
		p.raw = serveHuge(500)
		a := newTestAdapter(t, p.srv.URL, nil)
		r := a.Dispatch(t.Context(), testMessage(testPayload))
		if r.Outcome != dispatch.Retry || r.Err == nil || len(r.Err.Error()) > 300 {
			t.Errorf("got %v, Err of %d bytes", r.Outcome, len(r.Err.Error()))
		}
	})
	t.Run("read bounded", func(t *testing.T) {
		src := &countingBody{}
		a := newTestAdapter(t, "http://provider.invalid", func(c *Config) {
			c.ResponseLimit = 1000
			c.Transport = roundTripFunc(func(req *http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: 200, Header: http.Header{}, Body: src, Request: req}, nil
			})
		})
		r := a.Dispatch(t.Context(), testMessage(testPayload))
		if r.Outcome != dispatch.Success || len(r.Response) > 1000+32 || !src.closed {
			t.Errorf("got %v, %d-byte response, body closed %v", r.Outcome, len(r.Response), src.closed)
		}
		if src.n > 1001 {
			t.Errorf("read %d bytes of an endless body, want at most limit+1", src.n)
		}
	})
}

// countingBody is an endless response body that counts what is read.
type countingBody struct {
	n      int
	closed bool
}

func (b *countingBody) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	b.n += len(p)
	return len(p), nil
}

func (b *countingBody) Close() error {
	b.closed = true
	return nil
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestDispatchConcurrent(t *testing.T) {
	p := newProvider(t, func(r *http.Request) answer {
		return answer{200, hdr("Content-Type", "application/json"), `{"ok":true}`}
	})
	a := newTestAdapter(t, p.srv.URL, nil)
	const workers = 64
	var wg sync.WaitGroup
	results := make([]dispatch.Result, workers)
	for i := range workers {
		wg.Go(func() {
			m := testMessage(testPayload)
			m.Tuple.StepID = fmt.Sprint("step-", i)
			m.Key = m.Tuple.Key()
			results[i] = a.Dispatch(t.Context(), m)
		})
	}
	wg.Wait()
	for i, r := range results {
		if r.Outcome != dispatch.Success {
			t.Errorf("worker %d: %+v", i, r)
		}
	}
	keys := map[string]bool{}
	for _, req := range p.seen() {
		keys[req.header.Get("Idempotency-Key")] = true
	}
	if len(keys) != workers {
		t.Errorf("provider saw %d distinct keys, want %d", len(keys), workers)
	}
}

func TestCloseIsRepeatable(t *testing.T) {
	p := newProvider(t, func(*http.Request) answer { return answer{200, nil, ""} })
	a := newTestAdapter(t, p.srv.URL, nil)
	if r := a.Dispatch(t.Context(), testMessage(testPayload)); r.Outcome != dispatch.Success {
		t.Fatal(r)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if r := a.Dispatch(t.Context(), testMessage(testPayload)); r.Outcome != dispatch.Replay {
		t.Errorf("dispatch after Close: %+v", r)
	}
}
