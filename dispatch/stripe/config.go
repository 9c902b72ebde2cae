package stripe

import (
	"cmp"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/wire"
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

// Validate reports every problem of c at once, each naming its field: the
// rules of the config file's keys (Settings.Check) and of the runtime
// fields. The messages never quote the API key or the base URL.
func (c Config) Validate() error {
	ch := wire.NewChecker(nil)
	(&Settings{APIKey: wire.Secret(c.APIKey), StripeVersion: c.StripeVersion, BaseURL: c.BaseURL, Tools: c.Tools}).Check(ch)
	if c.Timeout <= 0 {
		ch.Errorf("timeout", "must be positive, got %s", c.Timeout)
	}
	if c.ResponseLimit < 0 {
		ch.Errorf("response_limit", "must not be negative, got %d", c.ResponseLimit)
	}
	if strings.ContainsFunc(c.UserAgent, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		ch.Errorf("user_agent", "contains a control character")
	}
	return ch.Errs.Err()
}

// version is the main module's version, or "dev" for a local build.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
