package dispatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/drainer-io/drainer/dispatch/wire"
	"github.com/drainer-io/drainer/outbox"
)

// This file holds what every HTTP-based adapter (webhook, stripe) shares: the
// classification of answers and transport errors of docs/reference.md §5, Retry-After,
// RFC 9457 problem details, and the bounded reading and storing of bodies.

// Reasons set by ClassifyHTTP and ClassifyTransportError: a small fixed set,
// safe as a log attribute or metric label.
const (
	ReasonHTTP2xx          = "http_2xx"           // 2xx: success
	ReasonReplay           = "replay"             // 2xx answered from the provider's idempotency cache
	ReasonPayloadMismatch  = "payload_mismatch"   // 409 Idempotency-Conflict: payload-mismatch
	ReasonInFlightUpstream = "in_flight_upstream" // other 409, 425: the key is still being processed
	ReasonHTTP408          = "http_408"
	ReasonHTTP429          = "http_429"
	ReasonHTTP5xx          = "http_5xx"        // 5xx other than 529
	ReasonHTTP529          = "http_529"        // provider overloaded
	ReasonAuth             = "auth"            // 401, 403, 407
	ReasonRedirect         = "redirect"        // 3xx, never followed
	ReasonHTTP4xx          = "http_4xx"        // other 4xx
	ReasonHTTPUnexpected   = "http_unexpected" // 1xx or a code outside 100-599
	ReasonConnect          = "connect"         // the request was never written
	ReasonTimeout          = "timeout"         // no answer in time after the request was written
	ReasonConnection       = "connection"      // connection lost after the request was written
	ReasonCancelled        = "cancelled"       // the caller's context was cancelled (shutdown)
)

// DefaultResponseLimit bounds the stored response and the bytes read of any
// answer's body.
const DefaultResponseLimit = 64 << 10

// excerptLimit bounds the body excerpt quoted in an HTTPError.
const excerptLimit = 200

// ClassifyHTTP maps an HTTP answer to an Outcome and a Reason, following the
// class table of docs/reference.md §5. Informational (1xx) and out-of-range codes are
// Terminal with ReasonHTTPUnexpected: no provider answers a POST that way, so
// retrying would repeat the same protocol error.
func ClassifyHTTP(status int, h http.Header) (Outcome, string) {
	switch {
	case status >= 200 && status <= 299:
		if headerIs(h, "Idempotency-Replay", "true") || headerIs(h, "Idempotent-Replayed", "true") {
			return Replay, ReasonReplay
		}
		return Success, ReasonHTTP2xx
	case status == http.StatusConflict:
		if headerIs(h, "Idempotency-Conflict", "payload-mismatch") {
			return Terminal, ReasonPayloadMismatch
		}
		return Retry, ReasonInFlightUpstream
	case status == http.StatusTooEarly:
		return Retry, ReasonInFlightUpstream
	case status == http.StatusRequestTimeout:
		return Retry, ReasonHTTP408
	case status == http.StatusTooManyRequests:
		return Retry, ReasonHTTP429
	case status == 529:
		return Retry, ReasonHTTP529
	case status >= 500 && status <= 599:
		return Retry, ReasonHTTP5xx
	case status == http.StatusUnauthorized, status == http.StatusForbidden,
		status == http.StatusProxyAuthRequired:
		return Auth, ReasonAuth
	case status >= 300 && status <= 399:
		return Terminal, ReasonRedirect
	case status >= 400 && status <= 499:
		return Terminal, ReasonHTTP4xx
	default:
		return Terminal, ReasonHTTPUnexpected
	}
}

// headerIs reports whether any value of header name equals want, ignoring
// case and surrounding space.
func headerIs(h http.Header, name, want string) bool {
	for _, v := range h.Values(name) {
		if strings.EqualFold(strings.TrimSpace(v), want) {
			return true
		}
	}
	return false
}

// ParseRetryAfter parses a Retry-After value: delta-seconds (digits only;
// values beyond the range of time.Duration saturate) or an HTTP-date
// (IMF-fixdate, RFC 850 or asctime), measured from now; a date in the past
// gives 0, true. Anything else gives 0, false. The result is never negative.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if strings.Trim(v, "0123456789") == "" {
		const maxSeconds = math.MaxInt64 / int64(time.Second)
		var n int64
		for i := range len(v) {
			n = n*10 + int64(v[i]-'0')
			if n > maxSeconds {
				return math.MaxInt64, true
			}
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

// ParseProblem decodes an RFC 9457 problem details document. It returns nil
// unless contentType is application/problem+json (parameters such as charset
// are ignored) and body is a JSON object. A member of the wrong type, or a
// status outside 100-999, is ignored on its own; it does not void the others.
func ParseProblem(contentType string, body []byte) *Problem {
	if mediaType(contentType) != "application/problem+json" {
		return nil
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(body, &members) != nil || members == nil {
		return nil
	}
	p := &Problem{}
	for name, dst := range map[string]*string{
		"type": &p.Type, "title": &p.Title, "detail": &p.Detail, "instance": &p.Instance,
	} {
		if raw, ok := members[name]; ok {
			_ = json.Unmarshal(raw, dst) // a wrong type leaves dst empty
		}
	}
	var status int
	if raw, ok := members["status"]; ok && json.Unmarshal(raw, &status) == nil && status >= 100 && status <= 999 {
		p.Status = status
	}
	return p
}

// String renders p for last_error and logs as "title: detail (type=…,
// instance=…)": one line, control characters replaced, each member cut to a
// bound so that the whole is at most 1 KiB. The status is left out: callers
// report the HTTP status themselves.
func (p *Problem) String() string {
	if p == nil {
		return ""
	}
	title, detail := wire.OneLine(p.Title, 160), wire.OneLine(p.Detail, 480)
	var b strings.Builder
	switch {
	case title != "" && detail != "":
		b.WriteString(title + ": " + detail)
	case title != "" || detail != "":
		b.WriteString(title + detail)
	default:
		b.WriteString("problem")
	}
	var attrs []string
	if t := wire.OneLine(p.Type, 160); t != "" && t != "about:blank" {
		attrs = append(attrs, "type="+t)
	}
	if i := wire.OneLine(p.Instance, 160); i != "" {
		attrs = append(attrs, "instance="+i)
	}
	if len(attrs) > 0 {
		b.WriteString(" (" + strings.Join(attrs, ", ") + ")")
	}
	return b.String()
}

// HTTPError is the redacted error of an answer that is not a success. It holds
// only the provider's answer (status, problem details or the start of the
// body), never a request header, the URL or the payload.
type HTTPError struct {
	Status  int
	Problem *Problem
	// Excerpt is the start of a body that is not a problem document, on one
	// line, at most about 200 bytes.
	Excerpt string
}

// NewHTTPError builds the error of an answer with status, its body and its
// parsed problem details (nil if none).
func NewHTTPError(status int, body []byte, p *Problem) *HTTPError {
	e := &HTTPError{Status: status, Problem: p}
	if p == nil {
		e.Excerpt = wire.OneLine(string(body[:min(len(body), 4*excerptLimit)]), excerptLimit)
	}
	return e
}

// Error returns e.g. `http 422 Unprocessable Entity: Invalid amount: must be
// positive (type=…)` or `http 502 Bad Gateway: body "upstream down"`.
func (e *HTTPError) Error() string {
	msg := "http " + strconv.Itoa(e.Status)
	if text := http.StatusText(e.Status); text != "" {
		msg += " " + text
	}
	if e.Status >= 300 && e.Status <= 399 {
		msg += " (redirects are not followed; configure the final URL)"
	}
	switch {
	case e.Problem != nil:
		msg += ": " + e.Problem.String()
	case e.Excerpt != "":
		msg += ": body " + strconv.Quote(e.Excerpt)
	}
	return msg
}

// SendTracker records whether an HTTP request may have reached the server:
// a request whose headers were never fully written cannot have been acted on.
// Use one tracker per attempt; it is safe for concurrent use.
type SendTracker struct{ wrote atomic.Bool }

// Trace returns ctx with a client trace that feeds t; send the request with it.
func (t *SendTracker) Trace(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteHeaders: func() { t.wrote.Store(true) },
	})
}

// MaybeSent reports whether the request's headers were written on some
// connection (the transport may retry on a fresh one; any write counts).
func (t *SendTracker) MaybeSent() bool { return t.wrote.Load() }

// ClassifyTransportError classifies an error of http.Client.Do or of reading
// a body. ctx is the context the request was sent with, before its cancel
// func is called (a per-attempt WithTimeout child reports Canceled only when
// its parent was cancelled); maybeSent tells whether the request may have been
// written (SendTracker.MaybeSent).
//
//   - ctx cancelled: ReasonCancelled, Err wraps context.Canceled; Retry with
//     NotSent if nothing was written, else Ambiguous.
//   - nothing written (refused, DNS, dial timeout, TLS handshake): Retry,
//     NotSent, ReasonConnect.
//   - written, then a deadline: Ambiguous, ReasonTimeout.
//   - written, then another failure (reset, EOF): Ambiguous, ReasonConnection.
//
// Err drops the *url.Error wrapper, whose text holds the URL and its query.
func ClassifyTransportError(ctx context.Context, err error, maybeSent bool) Result {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = ue.Err
	}
	r := Result{Outcome: Ambiguous, NotSent: !maybeSent}
	if r.NotSent {
		r.Outcome = Retry
	}
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		r.Reason = ReasonCancelled
		if cause := context.Cause(ctx); cause != context.Canceled {
			r.Err = fmt.Errorf("request cancelled: %w: %w", context.Canceled, cause)
		} else {
			r.Err = fmt.Errorf("request cancelled: %w", context.Canceled)
		}
	case r.NotSent:
		r.Reason = ReasonConnect
		r.Err = fmt.Errorf("request not sent: %w", err)
	case isTimeout(ctx, err):
		r.Reason = ReasonTimeout
		r.Err = fmt.Errorf("no answer in time after the request was sent: %w", err)
	default:
		r.Reason = ReasonConnection
		r.Err = fmt.Errorf("connection lost after the request was sent: %w", err)
	}
	return r
}

func isTimeout(ctx context.Context, err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	ne, ok := errors.AsType[net.Error](err)
	return ok && ne.Timeout()
}

// ReadBody reads at most limit+1 bytes of r (limit <= 0 means
// DefaultResponseLimit), never the rest of a larger body. truncated reports
// that r held more than limit bytes; the body then holds limit+1 bytes, so
// ResponseJSON(ct, body, limit) stores it as truncated text.
func ReadBody(r io.Reader, limit int) (body []byte, truncated bool, err error) {
	if limit <= 0 {
		limit = DefaultResponseLimit
	}
	body, err = io.ReadAll(io.LimitReader(r, int64(limit)+1))
	return body, len(body) > limit, err
}

// ResponseJSON returns the response stored for the agent (docs/reference.md §2),
// limit <= 0 meaning DefaultResponseLimit:
//
//   - the body itself when it is at most limit bytes of JSON that Postgres
//     jsonb accepts (valid UTF-8, no \u0000, no lone surrogate escape) and
//     is labelled JSON (application/json, text/json, +json, or no content
//     type); an object or array is taken whatever its label;
//   - otherwise {"body": "<text>", "truncated": <bool>}, the text being the
//     body with invalid UTF-8 and NUL replaced by U+FFFD, cut at a character
//     boundary so that its JSON encoding takes at most limit bytes. An empty
//     body gives {"body":"","truncated":false}, never null (which means "no
//     answer yet").
//
// The result is always valid JSON of at most limit+32 bytes.
func ResponseJSON(contentType string, body []byte, limit int) json.RawMessage {
	if limit <= 0 {
		limit = DefaultResponseLimit
	}
	if len(body) <= limit && JSONBStorable(body) {
		if trimmed := bytes.TrimLeft(body, " \t\r\n"); jsonLabelled(contentType) || trimmed[0] == '{' || trimmed[0] == '[' {
			return bytes.Clone(body)
		}
	}
	out := make([]byte, 0, min(len(body), limit)+32)
	out = append(out, `{"body":"`...)
	start, truncated := len(out), false
	var scratch [8]byte
	for i := 0; i < len(body); {
		r, size := utf8.DecodeRune(body[i:])
		enc := body[i : i+size]
		switch {
		case r == 0 || (r == utf8.RuneError && size == 1):
			enc = []byte("\uFFFD")
		case r == '"' || r == '\\':
			enc = append(scratch[:0], '\\', byte(r))
		case r < 0x20:
			enc = jsonControlEscape(scratch[:0], byte(r))
		}
		if len(out)-start+len(enc) > limit {
			truncated = true
			break
		}
		out = append(out, enc...)
		i += size
	}
	out = append(out, `","truncated":`...)
	out = strconv.AppendBool(out, truncated)
	return append(out, '}')
}

func jsonControlEscape(dst []byte, c byte) []byte {
	switch c {
	case '\n':
		return append(dst, `\n`...)
	case '\r':
		return append(dst, `\r`...)
	case '\t':
		return append(dst, `\t`...)
	}
	const hex = "0123456789abcdef"
	return append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
}

// JSONBStorable reports whether b is JSON that a Postgres jsonb column
// accepts: valid JSON in valid UTF-8, with no \u0000 escape and no
// unpaired surrogate escape (JSONBRefused).
func JSONBStorable(b []byte) bool {
	if !json.Valid(b) || !utf8.Valid(b) {
		return false
	}
	off, _ := JSONBRefused(b)
	return off < 0
}

// JSONBRefused returns the byte offset in valid JSON b of the first escape
// a Postgres jsonb column refuses, and why: a \u0000 (NUL), or a UTF-16
// surrogate escape without its other half; -1 when there is none. An
// escaped backslash followed by "u0000" (the text \u0000 in a string) is
// no such escape. It is outbox.JSONBRefused, which the producer API shares
// without importing the engine.
func JSONBRefused(b []byte) (off int, why string) { return outbox.JSONBRefused(b) }

// jsonLabelled reports whether contentType is absent or a JSON media type.
func jsonLabelled(contentType string) bool {
	if strings.TrimSpace(contentType) == "" {
		return true
	}
	mt := mediaType(contentType)
	return mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json")
}

// mediaType returns the lower-case media type of a Content-Type value, or ""
// when it cannot be parsed. Malformed parameters are tolerated.
func mediaType(contentType string) string {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil && !errors.Is(err, mime.ErrInvalidMediaParameter) {
		return ""
	}
	return mt
}
