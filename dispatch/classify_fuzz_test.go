package dispatch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/webhook"
	"github.com/drainer-io/drainer/drainer"
	"github.com/drainer-io/drainer/idemkey"
)

// lastErrorBound bounds the error text of one answer. The engine prefixes it
// with at most about 130 bytes ("outcome unknown: …") and cuts last_error at
// 2 KiB; an answer's error must fit with room to spare, so that it is never cut.
const lastErrorBound = 1536

// Secrets of the adapter's configuration: no answer may make them show up in
// an error (the URL's query and a configured header).
const (
	urlSecret    = "qs-secret-4e1d"
	headerSecret = "hdr-secret-9b27"
)

// reasons is the fixed vocabulary of Result.Reason for an HTTP answer.
var reasons = map[string]bool{
	dispatch.ReasonHTTP2xx: true, dispatch.ReasonReplay: true, dispatch.ReasonPayloadMismatch: true,
	dispatch.ReasonInFlightUpstream: true, dispatch.ReasonHTTP408: true, dispatch.ReasonHTTP429: true,
	dispatch.ReasonHTTP5xx: true, dispatch.ReasonHTTP529: true, dispatch.ReasonAuth: true,
	dispatch.ReasonRedirect: true, dispatch.ReasonHTTP4xx: true, dispatch.ReasonHTTPUnexpected: true,
}

// cannedProvider is an in-memory RoundTripper that answers every request with
// one canned answer. It fires the WroteHeaders trace hook as a real transport
// does, so the adapter knows the request may have reached the provider.
type cannedProvider struct {
	status int
	header http.Header
	body   []byte
}

func (p *cannedProvider) RoundTrip(req *http.Request) (*http.Response, error) {
	if trace := httptrace.ContextClientTrace(req.Context()); trace != nil && trace.WroteHeaders != nil {
		trace.WroteHeaders()
	}
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	return &http.Response{
		Status:        strconv.Itoa(p.status) + " " + http.StatusText(p.status),
		StatusCode:    p.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        p.header.Clone(),
		Body:          io.NopCloser(bytes.NewReader(p.body)),
		ContentLength: int64(len(p.body)),
		Request:       req,
	}, nil
}

// parseHeaderBlock reads "Name: value" lines; a line without a colon or with
// an empty name is ignored, as a lenient client would.
func parseHeaderBlock(block string) http.Header {
	h := http.Header{}
	for line := range strings.SplitSeq(block, "\n") {
		name, value, ok := strings.Cut(strings.TrimSuffix(line, "\r"), ":")
		if name = strings.TrimSpace(name); !ok || name == "" {
			continue
		}
		h.Add(name, strings.TrimSpace(value))
	}
	return h
}

// says reports whether some value of header name is want (docs/reference.md §5 names
// the values; case and surrounding space are tolerated).
func says(h http.Header, name, want string) bool {
	for _, v := range h.Values(name) {
		if strings.EqualFold(strings.TrimSpace(v), want) {
			return true
		}
	}
	return false
}

// expectedOutcome is the class table of docs/reference.md §5 for an HTTP answer.
// Codes the table does not name (1xx, outside 100-599) are never a success
// and never retried: Terminal.
func expectedOutcome(status int, h http.Header) dispatch.Outcome {
	switch {
	case status >= 200 && status <= 299:
		if says(h, "Idempotency-Replay", "true") || says(h, "Idempotent-Replayed", "true") {
			return dispatch.Replay
		}
		return dispatch.Success
	case status >= 300 && status <= 399:
		return dispatch.Terminal
	case status == 401 || status == 403 || status == 407:
		return dispatch.Auth
	case status == 409:
		if says(h, "Idempotency-Conflict", "payload-mismatch") {
			return dispatch.Terminal
		}
		return dispatch.Retry
	case status == 425, status == 408, status == 429, status >= 500 && status <= 599:
		return dispatch.Retry
	case status >= 400 && status <= 499:
		return dispatch.Terminal
	default:
		return dispatch.Terminal
	}
}

// FuzzClassify sends one row through the http adapter to a provider that
// answers with an arbitrary status, header block and body, and checks the
// classified result against docs/reference.md §5: the outcome of the class table
// (ClassifyHTTP agrees), a Retry-After that is never negative, is exact for
// delta-seconds (saturating, never wrapping), is measured against the
// provider's Date, and is capped by the route's max_retry_after in the
// engine's delay; and a last_error that is bounded, valid UTF-8, on one line,
// and free of the adapter's secrets.
func FuzzClassify(f *testing.F) {
	for _, seed := range []struct {
		status int
		header string
		body   string
	}{
		{200, "Content-Type: application/json", `{"id":"ch_1","amount":500}`},
		{201, "Idempotency-Replay: true\nContent-Type: application/json", `{"id":"ch_1"}`},
		{200, "Idempotent-Replayed:  TRUE ", ``},
		{200, "Idempotency-Replay: false\nIdempotency-Replay: true", `ok`},
		{204, "Idempotency-Replay: yes", ``},
		{301, "Location: https://elsewhere.example/v2/charge", ``},
		{308, "Location: /v2", `moved`},
		{401, "WWW-Authenticate: Bearer", `{"error":"bad token"}`},
		{407, "Retry-After: 5", ``},
		{409, "Idempotency-Conflict: payload-mismatch\nContent-Type: application/problem+json",
			`{"type":"https://errors.example/mismatch","title":"Payload mismatch","status":409,"detail":"key reused"}`},
		{409, "Idempotency-Conflict: in-flight", ``},
		{425, "Retry-After: 2", ``},
		{429, "Retry-After: 120", `slow down`},
		{429, "Retry-After: 99999999999999999999999", ``},
		{429, "Retry-After: 9223372036", ``},
		{503, "Retry-After: Sat, 21 Nov 2026 12:01:30 GMT\nDate: Sat, 21 Nov 2026 12:00:00 GMT", ``},
		{503, "Retry-After: Saturday, 21-Nov-26 12:02:00 GMT\nDate: Sat, 21 Nov 2026 12:00:00 GMT", ``},
		{503, "Retry-After: Sat Nov 21 11:00:10 2026\nDate: Sat, 21 Nov 2026 12:00:00 GMT", ``},
		{503, "Retry-After: Fri, 31 Dec 9999 23:59:59 GMT", ``},
		{502, "Retry-After: -1\nContent-Type: text/html", "<html>\x1b[31mupstream\u202e down\n</html>"},
		{529, "Retry-After: 1.5", ``},
		{500, "Content-Type: application/problem+json; charset=utf-8",
			`{"title":"Ünïcødé \u2028 fehler","detail":{"nested":[1,{"x":"y"}]},"status":"500","instance":"/errors/ä/1"}`},
		{408, "", "\xff\xfe\x00" + strings.Repeat("é", 300)},
		{422, "Content-Type: application/problem+json", `{"title":"` + strings.Repeat("\u00a0", 400) + `","detail":"d"}`},
		{100, "", ``},
		{0, "", ``},
		{-1, "", ``},
		{600, "Retry-After: 1", ``},
		{math.MaxInt, "", `x`},
	} {
		f.Add(seed.status, seed.header, []byte(seed.body))
	}

	provider := &cannedProvider{}
	adapter, err := webhook.New(webhook.Config{
		URL:       "http://provider.test/v1/{tool_name}?token=" + urlSecret,
		Headers:   map[string]string{"Authorization": "Bearer " + headerSecret},
		Transport: provider,
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = adapter.Close() })
	tuple := idemkey.Tuple{AgentRunID: "run-1", StepID: "charge", ToolName: "charge_card", BusinessScope: "invoice:7"}
	backoff := drainer.Backoff{Base: config.DefaultBackoffBase, Cap: config.DefaultBackoffCap, MaxRetryAfter: config.DefaultMaxRetryAfter}
	rng := rand.New(rand.NewPCG(1, 2))

	f.Fuzz(func(t *testing.T, status int, headerBlock string, body []byte) {
		if strings.Contains(headerBlock, "secret-") || bytes.Contains(body, []byte("secret-")) {
			return // an answer quoting a secret is the provider's doing
		}
		h := parseHeaderBlock(headerBlock)
		want := expectedOutcome(status, h)

		got, reason := dispatch.ClassifyHTTP(status, h)
		if got != want || !reasons[reason] {
			t.Fatalf("ClassifyHTTP(%d, %v) = %v, %q; want %v and a reason of the fixed set", status, h, got, reason, want)
		}

		provider.status, provider.header, provider.body = status, h, body
		before := dispatch.Now()
		r := adapter.Dispatch(context.Background(), &dispatch.Message{
			Key: tuple.Key(), Tuple: tuple, Payload: json.RawMessage(`{"amount":500}`), Attempt: 1,
		})
		after := dispatch.Now()

		if r.Outcome != want {
			t.Fatalf("status %d, header %v: outcome %v (reason %q, err %v), want %v", status, h, r.Outcome, r.Reason, r.Err, want)
		}
		if r.Status != status || r.Reason != reason {
			t.Fatalf("status %d: result status %d reason %q, want the answer's status and reason %q", status, r.Status, r.Reason, reason)
		}
		if r.RetryAfter < 0 {
			t.Fatalf("negative RetryAfter %v", r.RetryAfter)
		}

		if r.Succeeded() {
			if r.Err != nil || r.RetryAfter != 0 {
				t.Fatalf("success with err %v, RetryAfter %v", r.Err, r.RetryAfter)
			}
			if !json.Valid(r.Response) || len(r.Response) > dispatch.DefaultResponseLimit+32 {
				t.Fatalf("stored response is not bounded JSON: %q", r.Response)
			}
			if want := dispatch.ResponseJSON(h.Get("Content-Type"), body, 0); !bytes.Equal(r.Response, want) {
				t.Fatalf("stored response %q, want %q", r.Response, want)
			}
			return
		}

		// Retry-After: only a retry waits for it; never negative; capped.
		if want == dispatch.Retry {
			checkRetryAfter(t, h, r.RetryAfter, before, after)
			for _, k := range []int{1, 2, 12, 64, 1 << 20} {
				d := backoff.Delay(rng, k, r.RetryAfter)
				if floor := min(r.RetryAfter, backoff.MaxRetryAfter); d < floor || d > max(backoff.Cap, backoff.MaxRetryAfter) {
					t.Fatalf("attempt %d, Retry-After %v: delay %v outside [%v, %v]", k, r.RetryAfter, d, floor, max(backoff.Cap, backoff.MaxRetryAfter))
				}
			}
		} else if r.RetryAfter != 0 {
			t.Fatalf("%v answer with RetryAfter %v", r.Outcome, r.RetryAfter)
		}

		// last_error.
		if r.Err == nil {
			t.Fatalf("status %d: %v without an error", status, r.Outcome)
		}
		msg := r.Err.Error()
		if len(msg) > lastErrorBound || !utf8.ValidString(msg) {
			t.Fatalf("error is %d bytes (bound %d), valid UTF-8 %v: %q", len(msg), lastErrorBound, utf8.ValidString(msg), msg)
		}
		if i := strings.IndexFunc(msg, func(r rune) bool { return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp) }); i >= 0 {
			t.Fatalf("error has a control or format character at %d: %q", i, msg)
		}
		if prefix := "http " + strconv.Itoa(status); !strings.HasPrefix(msg, prefix) {
			t.Fatalf("error %q does not start with %q", msg, prefix)
		}
		if strings.Contains(msg, urlSecret) || strings.Contains(msg, headerSecret) {
			t.Fatalf("error reveals the adapter's configuration: %q", msg)
		}
		p := dispatch.ParseProblem(h.Get("Content-Type"), body)
		if (p == nil) != (r.Problem == nil) || (p != nil && *p != *r.Problem) {
			t.Fatalf("problem %+v, want %+v", r.Problem, p)
		}
		if p != nil && !strings.HasSuffix(msg, ": "+p.String()) {
			t.Fatalf("error %q does not end with the problem %q", msg, p.String())
		}
	})
}

// checkRetryAfter compares got with what the answer's Retry-After asks for:
// delta-seconds exactly (saturating at the largest duration), an HTTP-date
// measured against the answer's Date header, else against the clock read
// between before and after; anything else gives no floor.
func checkRetryAfter(t *testing.T, h http.Header, got time.Duration, before, after time.Time) {
	t.Helper()
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v != "" && strings.Trim(v, "0123456789") == "" {
		want := time.Duration(math.MaxInt64)
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n <= math.MaxInt64/int64(time.Second) {
			want = time.Duration(n) * time.Second
		}
		if got != want {
			t.Fatalf("Retry-After %q: floor %v, want %v", v, got, want)
		}
		return
	}
	date, err := http.ParseTime(v)
	if err != nil {
		if got != 0 {
			t.Fatalf("unparseable Retry-After %q gave floor %v", v, got)
		}
		return
	}
	if ref, err := http.ParseTime(h.Get("Date")); err == nil {
		if want := max(date.Sub(ref), 0); got != want {
			t.Fatalf("Retry-After %q with Date %q: floor %v, want %v", v, h.Get("Date"), got, want)
		}
		return
	}
	if lo, hi := max(date.Sub(after), 0), max(date.Sub(before), 0); got < lo || got > hi {
		t.Fatalf("Retry-After %q without Date: floor %v outside [%v, %v]", v, got, lo, hi)
	}
}
