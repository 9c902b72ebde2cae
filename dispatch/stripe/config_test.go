package stripe

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
)

func TestConfigWithDefaults(t *testing.T) {
	c := Config{APIKey: testAPIKey}.WithDefaults()
	if c.BaseURL != DefaultBaseURL || c.Timeout != DefaultTimeout || c.ResponseLimit != dispatch.DefaultResponseLimit ||
		!strings.HasPrefix(c.UserAgent, "drainer/") {
		t.Errorf("defaults: %+v", c)
	}
	c = Config{BaseURL: "http://x", Timeout: time.Second, ResponseLimit: 10, UserAgent: "ua"}.WithDefaults()
	if c.BaseURL != "http://x" || c.Timeout != time.Second || c.ResponseLimit != 10 || c.UserAgent != "ua" {
		t.Errorf("set fields overwritten: %+v", c)
	}
}

func TestConfigValidate(t *testing.T) {
	const secret = "sk_live_s3cr3t"
	valid := Config{APIKey: secret}.WithDefaults()
	tests := []struct {
		name string
		edit func(*Config)
		want []string
	}{
		{"valid", func(*Config) {}, nil},
		{"valid full", func(c *Config) {
			c.StripeVersion = "2024-09-30.acacia"
			c.BaseURL = "http://127.0.0.1:12111/prefix/"
			c.Tools = map[string]string{"open_account": "/v1/customers", "x": "/v1/checkout/sessions"}
		}, nil},
		{"missing key", func(c *Config) { c.APIKey = "" }, []string{"api_key: required"}},
		{"key with newline", func(c *Config) { c.APIKey = secret + "\nX-Evil: 1" }, []string{"api_key: contains a space or a control character"}},
		{"key with space", func(c *Config) { c.APIKey = "Bearer " + secret }, []string{"api_key: contains a space"}},
		{"version", func(c *Config) { c.StripeVersion = "latest" }, []string{`stripe_version: must be a Stripe API version like "2024-06-20", got "latest"`}},
		{"base url scheme", func(c *Config) { c.BaseURL = "ftp://x" }, []string{`base_url: must be an absolute http:// or https:// URL`}},
		{"base url relative", func(c *Config) { c.BaseURL = "/v1" }, []string{"base_url: must be an absolute http:// or https:// URL"}},
		{"base url no host", func(c *Config) { c.BaseURL = "https://" }, []string{"base_url: must be an absolute http:// or https:// URL (the host is missing)"}},
		{"base url userinfo", func(c *Config) { c.BaseURL = "https://" + secret + ":@api.stripe.com" }, []string{"base_url: must not contain userinfo"}},
		{"base url query", func(c *Config) { c.BaseURL = "https://api.stripe.com?k=" + secret }, []string{"base_url: must not contain a query"}},
		{"base url fragment", func(c *Config) { c.BaseURL = "https://api.stripe.com#x" }, []string{"base_url: must not contain a fragment"}},
		{"base url unparsable", func(c *Config) { c.BaseURL = "https://x/%zz" + secret }, []string{"base_url: not a valid URL"}},
		{"timeout", func(c *Config) { c.Timeout = -time.Second }, []string{"timeout: must be positive, got -1s"}},
		{"response limit", func(c *Config) { c.ResponseLimit = -1 }, []string{"response_limit: must not be negative, got -1"}},
		{"tool path with id", func(c *Config) {
			c.Tools = map[string]string{"capture": "/v1/payment_intents/pi_3MtwBwLkdIwHu7ix28a3tqPa/capture"}
		},
			[]string{`tools.capture: must be a Stripe API path like`}},
		{"tool path absolute url", func(c *Config) { c.Tools = map[string]string{"x": "https://evil/v1/charges"} }, []string{"tools.x: must be a Stripe API path"}},
		{"tool path dot segments", func(c *Config) { c.Tools = map[string]string{"x": "/v1/../admin"} }, []string{"tools.x: must be a Stripe API path"}},
		{"tool path v2", func(c *Config) { c.Tools = map[string]string{"x": "/v2/core/events"} }, []string{"tools.x: must be a Stripe API path"}},
		{"empty tool name", func(c *Config) { c.Tools = map[string]string{"": "/v1/charges"} }, []string{`tools: "" is not a valid tool name`}},
		{"user agent", func(c *Config) { c.UserAgent = "a\r\nb" }, []string{"user_agent: contains a control character"}},
		{"all at once", func(c *Config) {
			c.APIKey = ""
			c.StripeVersion = "v1"
			c.Timeout = 0
		}, []string{"api_key: required", "stripe_version", "timeout: must be positive"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid
			tt.edit(&c)
			err := c.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to contain %q", err, w)
				}
			}
			if joined, ok := err.(interface{ Unwrap() []error }); !ok || len(joined.Unwrap()) != len(tt.want) {
				t.Errorf("want %d joined errors, got %q", len(tt.want), err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("Validate() reveals the key: %q", err)
			}
		})
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	a, err := New(Config{BaseURL: "ftp://x"})
	if a != nil || err == nil {
		t.Fatalf("New() = %v, %v; want an error", a, err)
	}
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != 2 {
		t.Errorf("want the two problems joined, got %q", err)
	}
}

func TestEndpointTable(t *testing.T) {
	tools := Tools()
	if len(tools) < 20 {
		t.Fatalf("only %d tools", len(tools))
	}
	for _, name := range tools {
		path, ok := Endpoint(name)
		if !ok || !apiPath.MatchString(path) {
			t.Errorf("tool %s: path %q", name, path)
		}
	}
	for name, want := range map[string]string{
		"stripe.charges.create": "/v1/charges", "create_charge": "/v1/charges", "create_payment_intent": "/v1/payment_intents",
		"create_refund": "/v1/refunds", "refund_charge": "/v1/refunds", "create_customer": "/v1/customers",
		"create_transfer": "/v1/transfers", "create_checkout_session": "/v1/checkout/sessions",
	} {
		if got, _ := Endpoint(name); got != want {
			t.Errorf("Endpoint(%s) = %q, want %q", name, got, want)
		}
	}
}
