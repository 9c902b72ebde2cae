package mcp

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/drainer-io/drainer/dispatch"
)

// DefaultTimeout bounds one attempt when Config.Timeout is zero.
const DefaultTimeout = 30 * time.Second

// DefaultMessageLimit bounds the bytes read of one JSON-RPC message from the
// server. A larger answer is refused (terminal) without being read further.
const DefaultMessageLimit = 16 << 20

// reservedHeaders are set by the adapter; configured headers cannot override them.
var reservedHeaders = []string{
	"Idempotency-Key", "Mcp-Session-Id", "Mcp-Protocol-Version", "Content-Type",
	"Content-Length", "Accept", "Host", "Transfer-Encoding",
}

// Config configures one mcp adapter instance.
type Config struct {
	// URL is the server's Streamable HTTP endpoint (absolute http or https, no userinfo).
	URL string
	// Headers are sent on every request; values are expanded secrets and never
	// appear in errors.
	Headers map[string]string
	// Timeout bounds one attempt; the caller's deadline applies too.
	Timeout time.Duration
	// ResponseLimit bounds the stored response; 0 means dispatch.DefaultResponseLimit.
	ResponseLimit int
	// MessageLimit bounds the bytes read of one server message; 0 means DefaultMessageLimit.
	MessageLimit int
	// UserAgent is the User-Agent header; "" means "drainer".
	UserAgent string
	// ClientVersion is the version in the client identity sent to the
	// server (clientInfo); "" means "dev".
	ClientVersion string
	// Logger receives session re-establishments and a background start's
	// progress; nil discards them.
	Logger *slog.Logger
	// Transport replaces the adapter's own transport (tests); optional.
	Transport http.RoundTripper
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.ResponseLimit = cmp.Or(c.ResponseLimit, dispatch.DefaultResponseLimit)
	c.MessageLimit = cmp.Or(c.MessageLimit, DefaultMessageLimit)
	c.UserAgent = cmp.Or(c.UserAgent, "drainer")
	c.ClientVersion = cmp.Or(c.ClientVersion, "dev")
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports every problem of c at once, each naming its field. It never
// quotes the URL or a header value.
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
		case name == "" || strings.ContainsAny(name, " \t\r\n:()<>@,;\\\"/[]?={}"):
			errs = append(errs, fmt.Errorf("headers: %q is not a valid header name", name))
		case slices.ContainsFunc(reservedHeaders, func(r string) bool { return strings.EqualFold(r, name) }):
			errs = append(errs, fmt.Errorf("headers: %s is set by the adapter and cannot be overridden", name))
		case strings.ContainsAny(c.Headers[name], "\r\n\x00"):
			errs = append(errs, fmt.Errorf("headers: %s: value contains a control character", name))
		}
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("timeout: must be positive, got %s", c.Timeout))
	}
	if c.ResponseLimit < 0 {
		errs = append(errs, fmt.Errorf("response_limit: must not be negative, got %d", c.ResponseLimit))
	}
	if c.MessageLimit < 0 {
		errs = append(errs, fmt.Errorf("message_limit: must not be negative, got %d", c.MessageLimit))
	}
	return errors.Join(errs...)
}

func validateURL(s string) error {
	if s == "" {
		return errors.New("required")
	}
	u, err := url.Parse(s)
	if err != nil {
		return errors.New("not a valid URL")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("scheme must be http or https, got %q", u.Scheme)
	case u.User != nil:
		return errors.New("must not contain userinfo; send credentials in headers")
	case u.Host == "":
		return errors.New("host is missing")
	case u.Fragment != "":
		return errors.New("must not contain a fragment")
	}
	return nil
}
