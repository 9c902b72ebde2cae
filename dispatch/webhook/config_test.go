package webhook

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
)

func TestConfigWithDefaults(t *testing.T) {
	c := Config{URL: "http://x"}.WithDefaults()
	if c.Timeout != DefaultTimeout || c.ResponseLimit != dispatch.DefaultResponseLimit || !strings.HasPrefix(c.UserAgent, "drainer/") {
		t.Errorf("defaults: %+v", c)
	}
	c = Config{Timeout: time.Second, ResponseLimit: 10, UserAgent: "ua"}.WithDefaults()
	if c.Timeout != time.Second || c.ResponseLimit != 10 || c.UserAgent != "ua" {
		t.Errorf("set fields overwritten: %+v", c)
	}
}

func TestConfigValidate(t *testing.T) {
	const secret = "s3cr3t-value"
	valid := Config{URL: "https://api.example.com/v1/{tool_name}?tool={tool_name}", Timeout: time.Second}
	tests := []struct {
		name string
		edit func(*Config)
		want []string // substrings of the error; none means valid
	}{
		{"valid", func(*Config) {}, nil},
		{"valid without variable", func(c *Config) { c.URL = "http://127.0.0.1:8080/hook" }, nil},
		{"valid headers", func(c *Config) {
			c.Headers = map[string]string{"Authorization": "Bearer " + secret, "X-Tenant": "a\tb", "User-Agent": "custom"}
		}, nil},
		{"missing url", func(c *Config) { c.URL = "" }, []string{"url: required"}},
		{"relative url", func(c *Config) { c.URL = "/v1/{tool_name}" }, []string{"url: must be an absolute http:// or https:// URL"}},
		{"ftp", func(c *Config) { c.URL = "ftp://x/{tool_name}" }, []string{`url: must be an absolute http:// or https:// URL`}},
		{"no host", func(c *Config) { c.URL = "http:///path" }, []string{"url: must be an absolute http:// or https:// URL (the host is missing)"}},
		{"opaque", func(c *Config) { c.URL = "http:foo" }, []string{"url: must be an absolute http:// or https:// URL (the host is missing)"}},
		{"userinfo", func(c *Config) { c.URL = "https://user:" + secret + "@x/{tool_name}" }, []string{"url: must not contain userinfo"}},
		{"unknown variable", func(c *Config) { c.URL = "https://x/{tool}/{tool_name}?k=" + secret }, []string{"url: unknown URL variable {tool}; {tool_name} is the only one"}},
		{"stray brace", func(c *Config) { c.URL = "https://x/}{tool_name}" }, []string{"unbalanced { or }"}},
		{"variable in host", func(c *Config) { c.URL = "https://{tool_name}.example.com/" }, []string{"url: {tool_name} may appear only in the URL's path or query"}},
		{"fragment", func(c *Config) { c.URL = "https://x/{tool_name}#frag" }, []string{"url: must not contain a fragment"}},
		{"unparsable", func(c *Config) { c.URL = "https://x/%zz?k=" + secret }, []string{"url: not a valid URL"}},
		{"bad header name", func(c *Config) { c.Headers = map[string]string{"Bad Name": secret} }, []string{`headers.Bad Name: "Bad Name" is not a valid header name`}},
		{"empty header name", func(c *Config) { c.Headers = map[string]string{"": secret} }, []string{`headers: "" is not a valid header name`}},
		{"reserved headers", func(c *Config) {
			c.Headers = map[string]string{
				"idempotency-key": secret, "X-Agent-Idempotency-Tuple": secret, "Content-Type": secret,
				"Host": secret, "Content-Length": secret,
			}
		}, []string{
			"headers.idempotency-key: header idempotency-key is set by drainer", "headers.X-Agent-Idempotency-Tuple: header X-Agent-Idempotency-Tuple is set by drainer",
			"headers.Content-Type: header Content-Type is set by drainer", "headers.Host: header Host is set by drainer", "headers.Content-Length: header Content-Length is set by drainer",
		}},
		{"header value with newline", func(c *Config) { c.Headers = map[string]string{"Authorization": secret + "\r\nX-Evil: 1"} },
			[]string{"headers.Authorization: header values cannot contain"}},
		{"zero timeout", func(c *Config) { c.Timeout = 0 }, []string{"timeout: must be positive, got 0s"}},
		{"negative timeout", func(c *Config) { c.Timeout = -time.Second }, []string{"timeout: must be positive, got -1s"}},
		{"negative limit", func(c *Config) { c.ResponseLimit = -1 }, []string{"response_limit: must not be negative"}},
		{"user agent", func(c *Config) { c.UserAgent = "a\nb" }, []string{"user_agent: contains a control character"}},
		{"all at once", func(c *Config) {
			c.URL = "ftp://x"
			c.Timeout = 0
			c.Headers = map[string]string{"Host": secret}
		}, []string{"url: must be an absolute", "timeout: must be positive", "headers.Host: header Host is set by drainer"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid
			tt.edit(&c)
			err := c.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %q", tt.want)
			}
			msg := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("Validate() = %q, want it to contain %q", msg, w)
				}
			}
			if joined, ok := err.(interface{ Unwrap() []error }); !ok || len(joined.Unwrap()) != len(tt.want) {
				t.Errorf("want %d joined errors, got %q", len(tt.want), msg)
			}
			if strings.Contains(msg, secret) {
				t.Errorf("Validate() reveals a secret: %q", msg)
			}
		})
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	a, err := New(Config{URL: "https://x/{tool}", Headers: map[string]string{"Content-Type": "text/plain"}})
	if a != nil || err == nil {
		t.Fatalf("New() = %v, %v; want an error", a, err)
	}
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != 2 {
		t.Errorf("want the two problems joined, got %q", err)
	}
}

func TestNewAppliesDefaults(t *testing.T) {
	a, err := New(Config{URL: "https://x/{tool_name}"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.cfg.Timeout != DefaultTimeout || a.cfg.ResponseLimit != dispatch.DefaultResponseLimit {
		t.Errorf("defaults not applied: %+v", a.cfg)
	}
	base, ok := a.client.Transport.(interface{ Base() http.RoundTripper })
	if !ok {
		t.Fatalf("transport %#v does not wrap the adapter's own transport", a.client.Transport)
	}
	tr, ok := base.Base().(*http.Transport)
	if !ok || tr.MaxIdleConnsPerHost < 64 || tr.Proxy == nil {
		t.Errorf("transport: %#v", a.client.Transport)
	}
	if a.client == http.DefaultClient || a.client.Transport == http.DefaultTransport || a.client.CheckRedirect == nil {
		t.Error("adapter shares the default client or follows redirects")
	}
}
