package stripe

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/drainer-io/drainer/dispatch"
)

// Defaults applied by Config.WithDefaults.
const (
	DefaultBaseURL = "https://api.stripe.com"
	DefaultTimeout = 10 * time.Second
)

// maxToolName is the longest accepted tool name (idemkey.MaxFieldBytes).
const maxToolName = 1024

// Config configures one stripe adapter instance.
type Config struct {
	// APIKey is the secret or restricted key, sent as a bearer token. It never
	// appears in errors.
	APIKey string
	// StripeVersion pins the API version (Stripe-Version header), e.g.
	// "2024-06-20"; empty means the account's default version.
	StripeVersion string
	// BaseURL is the API's root, an absolute http or https URL without
	// userinfo, query or fragment (a path prefix is kept, for proxies);
	// "" means DefaultBaseURL.
	BaseURL string
	// Timeout bounds one attempt; the caller's deadline applies too.
	Timeout time.Duration
	// ResponseLimit bounds the bytes read of an answer and the stored
	// response; 0 means dispatch.DefaultResponseLimit.
	ResponseLimit int
	// Tools maps more tool names to API paths ("/v1/..." of lower-case
	// segments), adding to and overriding the built-in table (see Tools).
	Tools map[string]string
	// UserAgent is the User-Agent header; "" means "drainer/<version>".
	UserAgent string
	// Transport replaces the adapter's own transport (tests); optional.
	Transport http.RoundTripper
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.BaseURL = cmp.Or(c.BaseURL, DefaultBaseURL)
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.ResponseLimit = cmp.Or(c.ResponseLimit, dispatch.DefaultResponseLimit)
	c.UserAgent = cmp.Or(c.UserAgent, "drainer/"+version())
	return c
}

// stripeVersion is the syntax of an API version: a date, optionally followed
// by a release name ("2024-09-30.acacia").
var stripeVersion = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}(\.[a-z]+)?$`)

// Validate reports every problem of c at once, each naming its field. The
// messages never quote the API key or the base URL.
func (c Config) Validate() error {
	var errs []error
	switch {
	case c.APIKey == "":
		errs = append(errs, errors.New("api_key: required"))
	case strings.ContainsFunc(c.APIKey, func(r rune) bool { return r <= ' ' || r == 0x7f || r == utf8.RuneError }):
		errs = append(errs, errors.New("api_key: contains a space or a control character"))
	}
	if c.StripeVersion != "" && !stripeVersion.MatchString(c.StripeVersion) {
		errs = append(errs, fmt.Errorf(`stripe_version: must be an API version like "2024-06-20", got %q`, c.StripeVersion))
	}
	if err := validateBaseURL(c.BaseURL); err != nil {
		errs = append(errs, fmt.Errorf("base_url: %w", err))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("timeout: must be positive, got %s", c.Timeout))
	}
	if c.ResponseLimit < 0 {
		errs = append(errs, fmt.Errorf("response_limit: must not be negative, got %d", c.ResponseLimit))
	}
	for _, name := range slices.Sorted(maps.Keys(c.Tools)) {
		switch path := c.Tools[name]; {
		case name == "" || len(name) > maxToolName || !utf8.ValidString(name) || strings.ContainsRune(name, 0):
			errs = append(errs, fmt.Errorf("tools: %q is not a valid tool name", name))
		case !apiPath.MatchString(path):
			errs = append(errs, fmt.Errorf(`tools: %s: path must look like "/v1/customers" (lower-case segments), got %q`, name, path))
		}
	}
	if strings.ContainsFunc(c.UserAgent, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		errs = append(errs, errors.New("user_agent: contains a control character"))
	}
	return errors.Join(errs...)
}

// validateBaseURL checks the API root. Its errors never quote the URL.
func validateBaseURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return errors.New("not a valid URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("scheme must be http or https, got %q", u.Scheme)
	case u.Host == "":
		return errors.New("host is missing")
	case u.User != nil:
		return errors.New("must not contain userinfo; the API key is sent as a bearer token")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(raw, "#"):
		return errors.New("must not contain a query or a fragment")
	}
	return nil
}

// version is the main module's version, or "dev" for a local build.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
