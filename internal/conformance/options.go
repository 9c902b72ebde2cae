package conformance

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// Mode selects the answers the checks expect (docs/reference.md §11).
type Mode string

const (
	// ModeSeed: a replay answers 200, a payload mismatch 409 with
	// Idempotency-Conflict: payload-mismatch, in flight 409 (or 425) with
	// Idempotency-Conflict: in-flight.
	ModeSeed Mode = "seed"
	// ModeIETF: a replay answers the first write's status, a payload
	// mismatch 422, in flight 409.
	ModeIETF Mode = "ietf"
)

// ParseMode parses a mode name.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.ToLower(strings.TrimSpace(s))); m {
	case ModeSeed, ModeIETF:
		return m, nil
	}
	return "", fmt.Errorf("%q is not seed or ietf", s)
}

// Wire names the checks send and read.
const (
	HeaderKey         = "Idempotency-Key"
	HeaderTuple       = "X-Agent-Idempotency-Tuple"
	HeaderReplay      = "Idempotency-Replay"
	HeaderReplayed    = "Idempotent-Replayed"
	HeaderConflict    = "Idempotency-Conflict"
	HeaderRetryAfter  = "Retry-After"
	ConflictMismatch  = "payload-mismatch"
	ConflictInFlight  = "in-flight"
	contentTypeJSON   = "application/json"
	headerContentType = "Content-Type"
)

// Defaults and bounds of the options.
const (
	DefaultMethod      = http.MethodPost
	DefaultConcurrency = 10
	MaxConcurrency     = 1000
	DefaultTimeout     = 10 * time.Second
	// DefaultRounds bounds the bursts sent to observe an in-flight answer.
	DefaultRounds = 3
)

// DefaultPayload is the body sent when none is given.
var DefaultPayload = []byte(`{}`)

// reservedHeaders are set by the checks themselves (or by the HTTP client)
// and cannot be given with --header.
var reservedHeaders = []string{HeaderKey, HeaderTuple, "Host", "Content-Length", "Transfer-Encoding", "Connection"}

// Options configure a run. The zero value of each optional field means its
// default.
type Options struct {
	URL         string      // http or https; the only address ever contacted
	Method      string      // default POST
	Payload     []byte      // one JSON value; default {}
	Header      http.Header // sent with every request (Authorization, Content-Type, ...)
	Mode        Mode        // default seed
	Concurrency int         // connections per burst, 2..MaxConcurrency; default 10
	Timeout     time.Duration
	Rounds      int // bursts to observe an in-flight answer; default 3
	// Transport, when set, replaces the HTTP transport of single requests
	// (tests). Bursts always dial fresh connections of their own.
	Transport http.RoundTripper
}

// OptionError is a problem with the options: the CLI's usage error. Field
// names the option ("url", "header", ...).
type OptionError struct {
	Field string
	Err   error
}

func (e *OptionError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

// withDefaults validates o and fills in the defaults; all problems are
// reported at once, each an *OptionError.
func (o Options) withDefaults() (Options, *url.URL, error) {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &OptionError{Field: field, Err: fmt.Errorf(format, args...)})
	}
	u, err := ParseURL(o.URL)
	if err != nil {
		errs = append(errs, &OptionError{Field: "url", Err: err})
	}
	if o.Method == "" {
		o.Method = DefaultMethod
	}
	o.Method = strings.ToUpper(o.Method)
	if !httpguts.ValidHeaderFieldName(o.Method) { // a method is a token
		bad("method", "%q is not an HTTP method", o.Method)
	}
	if len(o.Payload) == 0 {
		o.Payload = DefaultPayload
	}
	if !json.Valid(o.Payload) {
		bad("payload", "not valid JSON")
	}
	if o.Mode == "" {
		o.Mode = ModeSeed
	}
	if _, err := ParseMode(string(o.Mode)); err != nil {
		bad("mode", "%v", err)
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Concurrency < 2 || o.Concurrency > MaxConcurrency {
		bad("concurrency", "%d is outside 2..%d", o.Concurrency, MaxConcurrency)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Timeout < 0 {
		bad("timeout", "%s is negative", o.Timeout)
	}
	if o.Rounds <= 0 {
		o.Rounds = DefaultRounds
	}
	for name := range o.Header {
		for _, r := range reservedHeaders {
			if strings.EqualFold(name, r) {
				bad("header", "%s is set by the checks themselves", r)
			}
		}
	}
	if len(errs) > 0 {
		return o, nil, errors.Join(errs...)
	}
	return o, u, nil
}

// ParseURL checks an endpoint URL: absolute, http or https, with a host and
// without a fragment. Errors never repeat a password or the query.
func ParseURL(raw string) (*url.URL, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, errors.New("missing: give the endpoint to probe, e.g. http://localhost:8080/v1/orders")
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("not a URL: %v", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("%s: scheme must be http or https", Display(u))
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("%s: no host", Display(u))
	case u.Fragment != "":
		return nil, fmt.Errorf("%s: a fragment is never sent; drop the #", Display(u))
	}
	return u, nil
}

// Display renders u for output: a password is masked and the query, which
// may carry a credential (?api_key=...), is shown as "?…".
func Display(u *url.URL) string {
	v := *u
	q := v.RawQuery != "" || v.ForceQuery
	v.RawQuery, v.ForceQuery, v.Fragment, v.RawFragment = "", false, "", ""
	s := v.Redacted()
	if q {
		s += "?…"
	}
	return s
}

// ParseHeader parses one --header value "Name=value" (the first = splits).
func ParseHeader(s string) (name, value string, err error) {
	name, value, ok := strings.Cut(s, "=")
	name = strings.TrimSpace(name)
	switch {
	case !ok:
		return "", "", fmt.Errorf("%q is not Name=value", redactHeader(s))
	case !httpguts.ValidHeaderFieldName(name):
		return "", "", fmt.Errorf("%q is not a valid header name", name)
	case !httpguts.ValidHeaderFieldValue(value):
		return "", "", fmt.Errorf("the value of %s holds a character a header cannot carry", name)
	}
	return name, value, nil
}

// redactHeader shows at most the name part of a malformed header argument:
// what follows a colon or space may be a credential.
func redactHeader(s string) string {
	if i := strings.IndexAny(s, ": "); i >= 0 {
		return s[:i] + "…"
	}
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
