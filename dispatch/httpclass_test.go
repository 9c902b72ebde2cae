package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"
)

func TestClassifyHTTP(t *testing.T) {
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return h
	}
	tests := []struct {
		status  int
		header  http.Header
		outcome Outcome
		reason  string
	}{
		{200, nil, Success, ReasonHTTP2xx},
		{201, nil, Success, ReasonHTTP2xx},
		{204, nil, Success, ReasonHTTP2xx},
		{299, nil, Success, ReasonHTTP2xx},
		{200, hdr("Idempotency-Replay", "true"), Replay, ReasonReplay},
		{201, hdr("Idempotency-Replay", " TRUE "), Replay, ReasonReplay},
		{200, hdr("Idempotent-Replayed", "True"), Replay, ReasonReplay},
		{200, hdr("Idempotent-Replayed", "false"), Success, ReasonHTTP2xx},
		{200, hdr("Idempotency-Replay", "yes"), Success, ReasonHTTP2xx},
		{409, hdr("Idempotency-Conflict", "payload-mismatch"), Terminal, ReasonPayloadMismatch},
		{409, hdr("Idempotency-Conflict", "Payload-Mismatch"), Terminal, ReasonPayloadMismatch},
		{409, hdr("Idempotency-Conflict", "in-progress"), Retry, ReasonInFlightUpstream},
		{409, nil, Retry, ReasonInFlightUpstream},
		{425, nil, Retry, ReasonInFlightUpstream},
		{408, nil, Retry, ReasonHTTP408},
		{429, nil, Retry, ReasonHTTP429},
		{500, nil, Retry, ReasonHTTP5xx},
		{502, nil, Retry, ReasonHTTP5xx},
		{503, nil, Retry, ReasonHTTP5xx},
		{599, nil, Retry, ReasonHTTP5xx},
		{529, nil, Retry, ReasonHTTP529},
		{401, nil, Auth, ReasonAuth},
		{403, nil, Auth, ReasonAuth},
		{407, nil, Auth, ReasonAuth},
		{300, nil, Terminal, ReasonRedirect},
		{301, nil, Terminal, ReasonRedirect},
		{302, nil, Terminal, ReasonRedirect},
		{304, nil, Terminal, ReasonRedirect},
		{307, nil, Terminal, ReasonRedirect},
		{308, nil, Terminal, ReasonRedirect},
		{400, nil, Terminal, ReasonHTTP4xx},
		{404, nil, Terminal, ReasonHTTP4xx},
		{410, nil, Terminal, ReasonHTTP4xx},
		{422, nil, Terminal, ReasonHTTP4xx},
		{499, nil, Terminal, ReasonHTTP4xx},
		{400, hdr("Idempotency-Conflict", "payload-mismatch"), Terminal, ReasonHTTP4xx},
		{100, nil, Terminal, ReasonHTTPUnexpected},
		{101, nil, Terminal, ReasonHTTPUnexpected},
		{0, nil, Terminal, ReasonHTTPUnexpected},
		{600, nil, Terminal, ReasonHTTPUnexpected},
		{-1, nil, Terminal, ReasonHTTPUnexpected},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d %v", tt.status, tt.header), func(t *testing.T) {
			outcome, reason := ClassifyHTTP(tt.status, tt.header)
			if outcome != tt.outcome || reason != tt.reason {
				t.Errorf("ClassifyHTTP(%d) = %v, %q; want %v, %q", tt.status, outcome, reason, tt.outcome, tt.reason)
			}
		})
	}
}

func TestClassifyHTTPEveryStatus(t *testing.T) {
	known := map[string]bool{
		ReasonHTTP2xx: true, ReasonInFlightUpstream: true, ReasonHTTP408: true, ReasonHTTP429: true,
		ReasonHTTP5xx: true, ReasonHTTP529: true, ReasonAuth: true, ReasonRedirect: true,
		ReasonHTTP4xx: true, ReasonHTTPUnexpected: true,
	}
	for status := range 1000 {
		outcome, reason := ClassifyHTTP(status, nil)
		if outcome == OutcomeUnknownZero || outcome == Ambiguous || !known[reason] {
			t.Errorf("ClassifyHTTP(%d) = %v, %q", status, outcome, reason)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"120", 120 * time.Second, true},
		{" 7 ", 7 * time.Second, true},
		{"0000000000000000000000000000000000000003", 3 * time.Second, true},
		{"9223372036", 9223372036 * time.Second, true},
		{"9223372037", math.MaxInt64, true},
		{"99999999999999999999999999999", math.MaxInt64, true},
		{"Sat, 21 Nov 2026 12:01:30 GMT", 90 * time.Second, true},     // IMF-fixdate
		{"Saturday, 21-Nov-26 12:02:00 GMT", 120 * time.Second, true}, // RFC 850
		{"Sat Nov 21 12:00:10 2026", 10 * time.Second, true},          // asctime
		{"Fri, 20 Nov 2026 12:00:00 GMT", 0, true},                    // past
		{"", 0, false},
		{"   ", 0, false},
		{"-1", 0, false},
		{"+5", 0, false},
		{"1.5", 0, false},
		{"5s", 0, false},
		{"tomorrow", 0, false},
		{"Sat, 21 Nov 2026 25:00:00 GMT", 0, false},
	}
	for _, tt := range tests {
		got, ok := ParseRetryAfter(tt.in, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestParseProblem(t *testing.T) {
	full := `{"type":"https://example.com/probs/out-of-credit","title":"You do not have enough credit.",
		"status":403,"detail":"Your current balance is 30, but that costs 50.","instance":"/account/12345/msgs/abc","balance":30}`
	tests := []struct {
		name, ct, body string
		want           *Problem
	}{
		{"full", "application/problem+json", full, &Problem{
			Type: "https://example.com/probs/out-of-credit", Title: "You do not have enough credit.", Status: 403,
			Detail: "Your current balance is 30, but that costs 50.", Instance: "/account/12345/msgs/abc",
		}},
		{"charset", "application/problem+json; charset=utf-8", `{"title":"t"}`, &Problem{Title: "t"}},
		{"upper case", "Application/Problem+JSON", `{"title":"t"}`, &Problem{Title: "t"}},
		{"bad parameter", "application/problem+json; charset", `{"title":"t"}`, &Problem{Title: "t"}},
		{"wrong member types", "application/problem+json",
			`{"type":1,"title":["x"],"status":"400","detail":"kept","instance":{}}`, &Problem{Detail: "kept"}},
		{"fractional status", "application/problem+json", `{"status":400.5,"title":"t"}`, &Problem{Title: "t"}},
		{"status out of range", "application/problem+json", `{"status":99999,"title":"t"}`, &Problem{Title: "t"}},
		{"null members", "application/problem+json", `{"title":null,"detail":"d"}`, &Problem{Detail: "d"}},
		{"empty object", "application/problem+json", `{}`, &Problem{}},
		{"plain json", "application/json", full, nil},
		{"no content type", "", full, nil},
		{"array", "application/problem+json", `[1]`, nil},
		{"null", "application/problem+json", `null`, nil},
		{"string", "application/problem+json", `"oops"`, nil},
		{"garbage", "application/problem+json", `{"title":`, nil},
		{"empty", "application/problem+json", ``, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ParseProblem(tt.ct, []byte(tt.body))
			if (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
				t.Errorf("ParseProblem = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestProblemString(t *testing.T) {
	tests := []struct {
		p    *Problem
		want string
	}{
		{nil, ""},
		{&Problem{}, "problem"},
		{&Problem{Title: "Out of credit", Detail: "balance 30", Type: "https://x/p", Instance: "/a/1", Status: 403},
			"Out of credit: balance 30 (type=https://x/p, instance=/a/1)"},
		{&Problem{Title: "t", Type: "about:blank"}, "t"},
		{&Problem{Detail: "only\ndetail\r\x00here\u202e"}, "only detail  here"},
		{&Problem{Instance: "/i"}, "problem (instance=/i)"},
	}
	for _, tt := range tests {
		if got := tt.p.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.p, got, tt.want)
		}
	}
	long := strings.Repeat("é", 5000)
	s := (&Problem{Type: long, Title: long, Detail: long, Instance: long}).String()
	if len(s) > 1024 || !utf8.ValidString(s) || !strings.Contains(s, "…") {
		t.Errorf("long problem: %d bytes, valid UTF-8 %v: %q", len(s), utf8.ValidString(s), s)
	}
}

func TestResponseJSON(t *testing.T) {
	tests := []struct {
		name, ct, body string
		limit          int
		want           string
	}{
		{"json object", "application/json", `{"id":"ch_1","amount":5}`, 0, `{"id":"ch_1","amount":5}`},
		{"json with charset", "application/json; charset=utf-8", `[1,2]`, 0, `[1,2]`},
		{"vendor json", "application/vnd.api+json", `"s"`, 0, `"s"`},
		{"no content type scalar", "", `42`, 0, `42`},
		{"mislabelled object", "text/plain", ` {"a":1}`, 0, ` {"a":1}`},
		{"text scalar stays text", "text/plain", `42`, 0, `{"body":"42","truncated":false}`},
		{"plain text", "text/plain", "OK", 0, `{"body":"OK","truncated":false}`},
		{"html", "text/html", `<p class="x">hi</p>`, 0, `{"body":"<p class=\"x\">hi</p>","truncated":false}`},
		{"empty", "application/json", "", 0, `{"body":"","truncated":false}`},
		{"invalid json", "application/json", `{"a":`, 0, `{"body":"{\"a\":","truncated":false}`},
		{"invalid utf-8", "text/plain", "a\xffb\xc3", 0, "{\"body\":\"a\ufffdb\ufffd\",\"truncated\":false}"},
		{"control characters", "text/plain", "a\x00b\x01\n\t\\", 0, "{\"body\":\"a\ufffdb\\u0001\\n\\t\\\\\",\"truncated\":false}"},
		{"json with NUL escape", "application/json", `{"a":"\u0000"}`, 0, `{"body":"{\"a\":\"\\u0000\"}","truncated":false}`},
		{"json with lone surrogate", "application/json", `["\ud800"]`, 0, `{"body":"[\"\\ud800\"]","truncated":false}`},
		{"json with lone low surrogate", "application/json", `["\udc00"]`, 0, `{"body":"[\"\\udc00\"]","truncated":false}`},
		{"json with surrogate pair", "application/json", `["\ud83d\ude00"]`, 0, `["\ud83d\ude00"]`},
		{"json with escaped backslash u", "application/json", `["\\u0000"]`, 0, `["\\u0000"]`},
		{"json with invalid utf-8", "application/json", "[\"\xff\"]", 0, "{\"body\":\"[\\\"\ufffd\\\"]\",\"truncated\":false}"},
		{"json at limit", "application/json", `[1,2]`, 5, `[1,2]`},
		{"json over limit", "application/json", `[1,2,3]`, 5, `{"body":"[1,2,","truncated":true}`},
		{"text over limit", "text/plain", "abcdef", 3, `{"body":"abc","truncated":true}`},
		{"cut at rune boundary", "text/plain", "aé€", 5, `{"body":"aé","truncated":true}`},
		{"escape counts toward limit", "text/plain", `ab"c`, 3, `{"body":"ab","truncated":true}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ResponseJSON(tt.ct, []byte(tt.body), tt.limit)
			if string(got) != tt.want {
				t.Errorf("ResponseJSON = %s\nwant            %s", got, tt.want)
			}
			if !json.Valid(got) {
				t.Errorf("not valid JSON: %s", got)
			}
		})
	}
}

func TestResponseJSONCopiesBody(t *testing.T) {
	body := []byte(`{"a":1}`)
	got := ResponseJSON("application/json", body, 0)
	body[1] = 'X'
	if string(got) != `{"a":1}` {
		t.Errorf("ResponseJSON aliases the body: %s", got)
	}
}

// endless is an infinite body that counts the bytes read from it.
type endless struct{ n int }

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	e.n += len(p)
	return len(p), nil
}

func TestReadBody(t *testing.T) {
	src := &endless{}
	body, truncated, err := ReadBody(src, 1000)
	if err != nil || !truncated || len(body) != 1001 || src.n > 1001+512 {
		t.Errorf("endless: len %d truncated %v err %v, read %d bytes", len(body), truncated, err, src.n)
	}
	stored := ResponseJSON("text/plain", body, 1000)
	if len(stored) > 1000+32 || !strings.HasSuffix(string(stored), `"truncated":true}`) {
		t.Errorf("stored %d bytes: %.60s…", len(stored), stored)
	}

	body, truncated, err = ReadBody(strings.NewReader("12345"), 5)
	if err != nil || truncated || string(body) != "12345" {
		t.Errorf("exact: %q %v %v", body, truncated, err)
	}
	body, truncated, err = ReadBody(strings.NewReader(strings.Repeat("1", 6)), 5)
	if err != nil || !truncated || len(body) != 6 {
		t.Errorf("one over: %q %v %v", body, truncated, err)
	}
	// A number prefix is valid JSON: the limit+1 byte keeps it from being stored as such.
	if got := ResponseJSON("application/json", body, 5); string(got) != `{"body":"11111","truncated":true}` {
		t.Errorf("truncated number stored as %s", got)
	}

	src = &endless{}
	if body, truncated, _ := ReadBody(src, 0); len(body) != DefaultResponseLimit+1 || !truncated {
		t.Errorf("default limit: len %d truncated %v", len(body), truncated)
	}

	boom := errors.New("boom")
	body, _, err = ReadBody(io.MultiReader(strings.NewReader("par"), iotestErr{boom}), 10)
	if !errors.Is(err, boom) || string(body) != "par" {
		t.Errorf("read error: %q %v", body, err)
	}
}

type iotestErr struct{ err error }

func (e iotestErr) Read([]byte) (int, error) { return 0, e.err }

func TestHTTPError(t *testing.T) {
	tests := []struct {
		err  *HTTPError
		want string
	}{
		{NewHTTPError(503, nil, nil), "http 503 Service Unavailable"},
		{NewHTTPError(502, []byte("  upstream\ndown  "), nil), `http 502 Bad Gateway: body "upstream down"`},
		{NewHTTPError(599, []byte(`"quoted"`), nil), `http 599: body "\"quoted\""`},
		{NewHTTPError(422, []byte(`{"title":"ignored"}`), &Problem{Title: "Invalid", Detail: "amount"}),
			"http 422 Unprocessable Entity: Invalid: amount"},
		{NewHTTPError(302, nil, nil), "http 302 Found (redirects are not followed; configure the final URL)"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
	e := NewHTTPError(500, []byte(strings.Repeat("x", 10000)), nil)
	if len(e.Excerpt) > excerptLimit || !strings.HasSuffix(e.Excerpt, "…") {
		t.Errorf("excerpt of %d bytes: %q", len(e.Excerpt), e.Excerpt)
	}
}

func TestClassifyTransportError(t *testing.T) {
	const secretURL = "https://api.example.com/v1/x?sig=query-secret"
	wrap := func(err error) error { return &url.Error{Op: "Post", URL: secretURL, Err: err} }
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	live := context.Background()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	withCause, cancelCause := context.WithCancelCause(context.Background())
	cancelCause(errors.New("shutdown grace elapsed"))
	expired, cancelExpired := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancelExpired()

	tests := []struct {
		name      string
		ctx       context.Context
		err       error
		maybeSent bool
		outcome   Outcome
		reason    string
		is        error
	}{
		{"refused", live, wrap(refused), false, Retry, ReasonConnect, syscall.ECONNREFUSED},
		{"dns", live, wrap(&net.DNSError{Err: "no such host", Name: "api.example.com", IsNotFound: true}), false, Retry, ReasonConnect, nil},
		{"dial timeout", expired, wrap(context.DeadlineExceeded), false, Retry, ReasonConnect, context.DeadlineExceeded},
		{"timeout after send", expired, wrap(context.DeadlineExceeded), true, Ambiguous, ReasonTimeout, context.DeadlineExceeded},
		{"net timeout after send", live, wrap(timeoutErr{}), true, Ambiguous, ReasonTimeout, nil},
		{"eof after send", live, wrap(io.EOF), true, Ambiguous, ReasonConnection, io.EOF},
		{"reset after send", live, wrap(&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}), true, Ambiguous, ReasonConnection, syscall.ECONNRESET},
		{"cancelled before send", cancelled, wrap(context.Canceled), false, Retry, ReasonCancelled, context.Canceled},
		{"cancelled after send", cancelled, wrap(context.Canceled), true, Ambiguous, ReasonCancelled, context.Canceled},
		{"cancelled with cause", withCause, wrap(context.Canceled), true, Ambiguous, ReasonCancelled, context.Canceled},
		{"unwrapped error", live, io.ErrUnexpectedEOF, true, Ambiguous, ReasonConnection, io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ClassifyTransportError(tt.ctx, tt.err, tt.maybeSent)
			if r.Outcome != tt.outcome || r.Reason != tt.reason || r.NotSent == tt.maybeSent {
				t.Errorf("got %v %q NotSent=%v; want %v %q NotSent=%v", r.Outcome, r.Reason, r.NotSent, tt.outcome, tt.reason, !tt.maybeSent)
			}
			if r.Err == nil || (tt.is != nil && !errors.Is(r.Err, tt.is)) {
				t.Errorf("Err = %v, want one wrapping %v", r.Err, tt.is)
			}
			if msg := r.Err.Error(); strings.Contains(msg, "query-secret") || strings.Contains(msg, "api.example.com/v1") {
				t.Errorf("Err names the URL: %s", msg)
			}
		})
	}
	r := ClassifyTransportError(withCause, wrap(context.Canceled), true)
	if !strings.Contains(r.Err.Error(), "shutdown grace elapsed") {
		t.Errorf("cause lost: %v", r.Err)
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestSendTracker(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	post := func(target string) (*SendTracker, error) {
		var st SendTracker
		req, err := http.NewRequestWithContext(st.Trace(t.Context()), http.MethodPost, target, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return &st, err
	}
	if st, err := post(srv.URL); err != nil || !st.MaybeSent() {
		t.Errorf("answered request: MaybeSent %v, err %v", st.MaybeSent(), err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	st, err := post(closed)
	if err == nil || st.MaybeSent() {
		t.Errorf("refused connection: MaybeSent %v, err %v", st.MaybeSent(), err)
	}
	if r := ClassifyTransportError(t.Context(), err, st.MaybeSent()); r.Outcome != Retry || !r.NotSent || r.Reason != ReasonConnect {
		t.Errorf("refused connection classified %+v", r)
	}
}

// TestRetryAfterUsesProviderClock: an HTTP-date Retry-After is measured
// against the provider's Date header, so a skewed local clock changes
// nothing; without a Date header it falls back to the (skewed) local clock.
func TestRetryAfterUsesProviderClock(t *testing.T) {
	t.Cleanup(func() { SetClockSkew(0) })
	provider := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	h := http.Header{}
	h.Set("Date", provider.Format(http.TimeFormat))
	h.Set("Retry-After", provider.Add(25*time.Second).Format(http.TimeFormat))
	for _, skew := range []time.Duration{-time.Hour, 0, 90 * time.Second} {
		SetClockSkew(skew)
		if got := RetryAfter(h); got != 25*time.Second {
			t.Fatalf("skew %s: Retry-After %s; want 25s whatever the local clock", skew, got)
		}
	}
	h.Del("Date")
	h.Set("Retry-After", Now().Add(time.Hour).Format(http.TimeFormat))
	if got := RetryAfter(h); got < 59*time.Minute || got > time.Hour {
		t.Fatalf("without Date: %s; want about an hour", got)
	}
}
