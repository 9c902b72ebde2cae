package webhook

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/drainer-io/drainer/dispatch"
)

// DefaultTimeout bounds one attempt when Config.Timeout is zero.
const DefaultTimeout = 10 * time.Second

// toolNameVar is the only template variable of Config.URL.
const toolNameVar = "{tool_name}"

// reservedHeaders are set by the adapter on every request; configured headers
// may not override them.
var reservedHeaders = []string{
	"Idempotency-Key", "X-Agent-Idempotency-Tuple", "Content-Type", "Content-Length",
	"Host", "Transfer-Encoding",
}

// Config configures one http adapter instance.
type Config struct {
	// URL is the target, an absolute http or https URL. {tool_name}, replaced
	// by the row's tool_name escaped with url.PathEscape, is the only template
	// variable; it may appear in the path or the query. No userinfo: send
	// credentials in Headers.
	URL string
	// Headers are sent on every request. Values are already expanded secrets;
	// they never appear in errors. The adapter's own headers (reservedHeaders)
	// cannot be overridden; User-Agent can.
	Headers map[string]string
	// Timeout bounds one attempt, from dialling to the end of the body; the
	// caller's context deadline applies too, whichever comes first.
	Timeout time.Duration
	// ResponseLimit bounds the bytes read of an answer's body and the stored
	// response; 0 means dispatch.DefaultResponseLimit.
	ResponseLimit int
	// UserAgent is the User-Agent header; "" means "drainer/<version>".
	UserAgent string
	// KeyPlacement is where the idempotency key travels; zero means header
	// Idempotency-Key. X-Agent-Idempotency-Tuple is sent as a header wherever
	// the key goes.
	KeyPlacement KeyPlacement
	// ToolKeyPlacement overrides KeyPlacement per tool_name (routes with an
	// idempotency_key of their own).
	ToolKeyPlacement map[string]KeyPlacement
	// Routes gives tools their own method, path and fixed query (routes with
	// method, path or query); a tool without one is POSTed to URL.
	Routes map[string]Route
	// Transport replaces the adapter's own transport (tests); optional.
	Transport http.RoundTripper
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.ResponseLimit = cmp.Or(c.ResponseLimit, dispatch.DefaultResponseLimit)
	c.UserAgent = cmp.Or(c.UserAgent, "drainer/"+version())
	return c
}

// Validate reports every problem of c at once, each naming its field. The
// messages never quote the URL (its query may hold a secret) nor a header value.
func (c Config) Validate() error {
	var errs []error
	if err := validateURL(c.URL); err != nil {
		errs = append(errs, fmt.Errorf("url: %w", err))
	}
	names := make([]string, 0, len(c.Headers))
	for name := range c.Headers {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		switch {
		case !isToken(name):
			errs = append(errs, fmt.Errorf("headers: %q is not a valid header name", name))
		case slices.ContainsFunc(reservedHeaders, func(r string) bool { return strings.EqualFold(r, name) }):
			errs = append(errs, fmt.Errorf("headers: %s is set by the adapter and cannot be overridden", name))
		case !validHeaderValue(c.Headers[name]):
			errs = append(errs, fmt.Errorf("headers: %s: value contains a control character", name))
		}
	}
	if err := validatePlacement(c.KeyPlacement, c.URL, c.Headers); err != nil {
		errs = append(errs, fmt.Errorf("idempotency_key: %w", err))
	}
	for _, tool := range slices.Sorted(maps.Keys(c.ToolKeyPlacement)) {
		if err := validatePlacement(c.ToolKeyPlacement[tool], c.URL, c.Headers); err != nil {
			errs = append(errs, fmt.Errorf("idempotency_key of tool %q: %w", tool, err))
		}
	}
	for _, tool := range slices.Sorted(maps.Keys(c.Routes)) {
		if err := validateRoute(c.Routes[tool], c.placementFor(tool)); err != nil {
			errs = append(errs, fmt.Errorf("route of tool %q: %w", tool, err))
		}
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("timeout: must be positive, got %s", c.Timeout))
	}
	if c.ResponseLimit < 0 {
		errs = append(errs, fmt.Errorf("response_limit: must not be negative, got %d", c.ResponseLimit))
	}
	if !validHeaderValue(c.UserAgent) {
		errs = append(errs, errors.New("user_agent: contains a control character"))
	}
	return errors.Join(errs...)
}

// validateURL checks the URL template. Its errors never quote the URL.
func validateURL(tmpl string) error {
	if tmpl == "" {
		return errors.New("required")
	}
	if rest := strings.ReplaceAll(tmpl, toolNameVar, ""); strings.ContainsAny(rest, "{}") {
		v := rest[strings.IndexAny(rest, "{}"):]
		if end := strings.IndexByte(v, '}'); end >= 0 && v[0] == '{' {
			v = v[:end+1]
		} else {
			v = v[:1]
		}
		return fmt.Errorf("unknown template variable or stray brace %q: {tool_name} is the only variable", v)
	}
	const marker = "drainer-tool-name"
	u, err := url.Parse(strings.ReplaceAll(tmpl, toolNameVar, marker))
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err // url.Error quotes the whole URL
		}
		return fmt.Errorf("not a valid URL: %w", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("scheme must be http or https, got %q", u.Scheme)
	case u.User != nil:
		return errors.New("must not contain userinfo; send credentials in headers")
	case u.Host == "":
		return errors.New("host is missing")
	case strings.Contains(u.Host, marker):
		return errors.New("{tool_name} may appear only in the path or the query")
	case u.Fragment != "" || strings.Contains(tmpl, "#"):
		return errors.New("must not contain a fragment")
	}
	return nil
}

// isToken reports whether s is an RFC 9110 token, the syntax of header names.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// validHeaderValue reports whether v has no control character but tab.
func validHeaderValue(v string) bool {
	return !strings.ContainsFunc(v, func(r rune) bool { return (r < 0x20 && r != '\t') || r == 0x7f })
}

// version is the main module's version, or "dev" for a local build.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
