package stripe

import (
	"context"
	"errors"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/wire"
)

// The stripe adapter's config keys and their rules (docs/reference.md §4),
// and its registration as adapter type stripe.

// DefaultKeyTTL is Stripe's idempotency window, the stripe adapter's
// key_ttl when the config leaves it unset.
const DefaultKeyTTL = 24 * time.Hour

// Settings are the keys of a stripe adapter in the config file.
type Settings struct {
	// APIKey is the secret or restricted key.
	APIKey wire.Secret `yaml:"api_key"`
	// StripeVersion pins the API version, e.g. "2024-06-20".
	StripeVersion string `yaml:"stripe_version"`
	// BaseURL is the API's root (tests, proxies).
	BaseURL string `yaml:"base_url"`
	// Tools maps tool names to Stripe API paths (charge_card: /v1/charges),
	// adding to the adapter's built-in table.
	Tools map[string]string `yaml:"tools"`
}

// stripeVersion is the syntax of an API version: a date, optionally followed
// by a release name ("2024-09-30.acacia").
var stripeVersion = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}(\.[a-z]+)?$`)

// Check reports every problem of the settings. Its messages never quote the
// API key or the base URL.
func (s *Settings) Check(c *wire.Checker) {
	if c.Require("api_key", s.APIKey == "") &&
		strings.ContainsFunc(s.APIKey.Reveal(), func(r rune) bool { return r <= ' ' || r == 0x7f || r == utf8.RuneError }) {
		c.Errorf("api_key", "contains a space or a control character")
	}
	if f := "stripe_version"; c.Set(f, s.StripeVersion == "") && c.Known(f) && !stripeVersion.MatchString(s.StripeVersion) {
		c.Errorf(f, `must be a Stripe API version like "2024-06-20", got %s`, c.Quote(f, s.StripeVersion))
	}
	if f := "base_url"; c.Set(f, s.BaseURL == "") && c.Known(f) {
		if err := validateBaseURL(s.BaseURL); err != nil {
			c.Errorf(f, "%v", err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.Tools)) {
		f := wire.Join("tools", name)
		switch path := s.Tools[name]; {
		case name == "" || len(name) > maxToolName || !utf8.ValidString(name) || strings.ContainsRune(name, 0):
			c.KeyErrorf(f, "%q is not a valid tool name", name)
		case !c.Known(f):
		case !apiPath.MatchString(path):
			c.Errorf(f, `must be a Stripe API path like "/v1/charges" (lower-case segments), got %q`, path)
		}
	}
}

// validateBaseURL checks the API root. Its errors never quote the URL.
func validateBaseURL(raw string) error {
	u, err := wire.ParseEndpoint(raw)
	if err != nil {
		return err
	}
	if u.RawQuery != "" || u.ForceQuery {
		return errors.New("must not contain a query")
	}
	return nil
}

// configure turns a stripe adapter's settings into its runtime config. The
// API key is revealed here, at the last step before the wire.
func configure(in dispatch.BuildInput) (dispatch.Start, error) {
	s := in.Settings.(*Settings)
	c := Config{APIKey: s.APIKey.Reveal(), StripeVersion: s.StripeVersion, BaseURL: s.BaseURL, Tools: s.Tools,
		Timeout: in.Timeout, UserAgent: in.UserAgent()}
	if err := c.WithDefaults().Validate(); err != nil {
		return nil, err
	}
	return dispatch.StartWith(func(context.Context) (*Adapter, error) { return New(c) }), nil
}

func init() {
	dispatch.RegisterKind(dispatch.Kind{
		Type:          "stripe",
		DefaultKeyTTL: DefaultKeyTTL,
		NewSettings:   func() dispatch.Settings { return new(Settings) },
		Configure:     configure,
	})
}
