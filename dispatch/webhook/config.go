package webhook

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"runtime/debug"
	"slices"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/wire"
)

// DefaultTimeout bounds one attempt when Config.Timeout is zero.
const DefaultTimeout = 10 * time.Second

// toolNameVar is the only template variable of Config.URL.
const toolNameVar = "{tool_name}"

// Config configures one http adapter instance.
type Config struct {
	// URL is the target, an absolute http or https URL. {tool_name}, replaced
	// by the row's tool_name escaped with url.PathEscape, is the only template
	// variable; it may appear in the path or the query. No userinfo: send
	// credentials in Headers.
	URL string
	// Headers are sent on every request. Values are already expanded secrets;
	// they never appear in errors. The headers drainer sets
	// (wire.SetByDrainer) cannot be overridden; User-Agent can.
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
	// Routes gives tools their own method, path, fixed query and body mode
	// (routes with method, path, query or body); a tool without one is
	// POSTed to URL with its payload as the body.
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

// Validate reports every problem of c at once, each naming its field: the
// rules of the config file's keys (Settings.Check) and of the runtime
// fields. The messages never quote the URL (its query may hold a secret)
// nor a header value.
func (c Config) Validate() error {
	ch := wire.NewChecker(nil)
	c.settings().Check(ch)
	for _, tool := range slices.Sorted(maps.Keys(c.ToolKeyPlacement)) {
		checkPlacement(ch, fmt.Sprintf("idempotency_key of tool %q", tool), c.ToolKeyPlacement[tool], c.URL, c.Headers)
	}
	for _, tool := range slices.Sorted(maps.Keys(c.Routes)) {
		checkRoute(ch, fmt.Sprintf("route of tool %q", tool), c.Routes[tool], c.placementFor(tool))
	}
	if c.Timeout <= 0 {
		ch.Errorf("timeout", "must be positive, got %s", c.Timeout)
	}
	if c.ResponseLimit < 0 {
		ch.Errorf("response_limit", "must not be negative, got %d", c.ResponseLimit)
	}
	if !wire.ValidHeaderValue(c.UserAgent) {
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
