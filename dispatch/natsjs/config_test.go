package natsjs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/drainer-io/drainer/dispatch"
)

func TestConfigValidate(t *testing.T) {
	valid := Config{Servers: []string{"nats://a:4222", "tls://u:" + credential + "@b:4222"}, Subject: "agents.{tool_name}.intents", Stream: "INTENTS", Timeout: time.Second}
	tests := []struct {
		name string
		edit func(*Config)
		want []string
	}{
		{"valid", func(*Config) {}, nil},
		{"plain subject", func(c *Config) { c.Subject = "intents" }, nil},
		{"no servers", func(c *Config) { c.Servers = nil }, []string{"servers: required field is missing"}},
		{"bad scheme", func(c *Config) { c.Servers = []string{"nats://a", "http://u:" + credential + "@h"} }, []string{"servers[1]: must be a server URL"}},
		{"no host", func(c *Config) { c.Servers = []string{"nats://"} }, []string{"servers[0]"}},
		{"no subject", func(c *Config) { c.Subject = "" }, []string{"subject: required"}},
		{"wildcard", func(c *Config) { c.Subject = "agents.*" }, []string{"subject:", "wildcards"}},
		{"full wildcard", func(c *Config) { c.Subject = "agents.>" }, []string{"wildcards"}},
		{"empty token", func(c *Config) { c.Subject = "agents..x" }, []string{"empty token"}},
		{"space", func(c *Config) { c.Subject = "agents x" }, []string{"whitespace"}},
		{"partial variable", func(c *Config) { c.Subject = "agents.tool_{tool_name}" }, []string{"whole token"}},
		{"unknown variable", func(c *Config) { c.Subject = "agents.{tool}" }, []string{"{tool_name} is the only variable"}},
		{"bad stream", func(c *Config) { c.Stream = "a.b" }, []string{"stream: must be a JetStream stream name"}},
		{"timeout", func(c *Config) { c.Timeout = 0 }, []string{"timeout: must be positive"}},
		{"all at once", func(c *Config) { c.Servers = nil; c.Subject = ""; c.Timeout = -1 }, []string{"servers:", "subject:", "timeout:"}},
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
					t.Errorf("Validate() = %q, want %q", err, w)
				}
			}
			if strings.Contains(err.Error(), credential) {
				t.Errorf("Validate() reveals a server's password: %v", err)
			}
		})
	}
	if c := (Config{}).WithDefaults(); c.Timeout != DefaultTimeout || c.Name != DefaultName || c.Logger == nil {
		t.Errorf("defaults: %+v", c)
	}
}

func TestSubject(t *testing.T) {
	s, err := parseSubject("a.{tool_name}.b")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.expand("charge_card"); err != nil || got != "a.charge_card.b" {
		t.Errorf("expand = %q, %v", got, err)
	}
	if s.filter() != "a.*.b" || !s.templated() {
		t.Errorf("filter %q", s.filter())
	}
	for _, bad := range []string{"", "x.y", "*", ">", "a b", "\x00", "é\u2028"} {
		if _, err := s.expand(bad); err == nil {
			t.Errorf("expand(%q) accepted", bad)
		}
	}
	if got, err := s.expand("über-tool*"); err != nil || got != "a.über-tool*.b" {
		t.Errorf("a literal token: %q, %v", got, err)
	}
	plain, _ := parseSubject("a.b")
	if got, err := plain.expand("any.thing"); err != nil || got != "a.b" || plain.templated() {
		t.Errorf("plain subject: %q, %v", got, err)
	}
}

func TestClassify(t *testing.T) {
	live := context.Background()
	expired, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	apiErr := func(code int, errCode jetstream.ErrorCode) error {
		return fmt.Errorf("nats: %w", &jetstream.APIError{Code: code, ErrorCode: errCode, Description: "described"})
	}
	full := fmt.Errorf("nats: %w", &jetstream.APIError{Code: 503, ErrorCode: 10077, Description: "maximum messages exceeded"})
	tests := []struct {
		name    string
		ctx     context.Context
		err     error
		outcome dispatch.Outcome
		notSent bool
		reason  string
	}{
		{"no stream", live, jetstream.ErrNoStreamResponse, dispatch.Retry, true, ReasonNoStream},
		{"no responders", live, nats.ErrNoResponders, dispatch.Retry, true, ReasonNoStream},
		{"max payload", live, nats.ErrMaxPayload, dispatch.Terminal, true, ReasonTooLarge},
		{"closed", live, nats.ErrConnectionClosed, dispatch.Retry, true, dispatch.ReasonConnect},
		{"reconnecting", live, nats.ErrReconnectBufExceeded, dispatch.Retry, true, dispatch.ReasonConnect},
		{"draining", live, nats.ErrConnectionDraining, dispatch.Retry, true, dispatch.ReasonConnect},
		{"timeout", expired, context.DeadlineExceeded, dispatch.Ambiguous, false, dispatch.ReasonTimeout},
		{"nats timeout", live, nats.ErrTimeout, dispatch.Ambiguous, false, dispatch.ReasonTimeout},
		{"bad ack", live, jetstream.ErrInvalidJSAck, dispatch.Ambiguous, false, ReasonInvalidAck},
		{"other", live, errors.New("boom"), dispatch.Ambiguous, false, dispatch.ReasonConnection},
		{"too large", live, apiErr(400, 10054), dispatch.Terminal, false, ReasonTooLarge},
		{"header too large", live, apiErr(400, 10097), dispatch.Terminal, false, ReasonTooLarge},
		{"stream mismatch", live, apiErr(400, 10060), dispatch.Retry, true, ReasonStreamConfig},
		{"sealed", live, apiErr(400, 10109), dispatch.Retry, true, ReasonStreamConfig},
		{"js disabled", live, apiErr(503, 10076), dispatch.Retry, true, ReasonStreamConfig},
		{"in process", live, apiErr(409, 10158), dispatch.Retry, true, ReasonInFlight},
		{"store failed", live, apiErr(503, 10077), dispatch.Retry, false, ReasonUnavailable},
		{"stream full", live, full, dispatch.Retry, false, ReasonStreamFull},
		{"insufficient resources", live, apiErr(503, 10023), dispatch.Retry, false, ReasonUnavailable},
		{"other 400", live, apiErr(400, 10003), dispatch.Terminal, false, ReasonRejected},
	}
	// An error acknowledgement is JetStream's refusal: it counts as an
	// attempt (Refused) unless it waits for a fix or another attempt.
	refused := map[string]bool{"too large": true, "header too large": true, "store failed": true, "insufficient resources": true, "other 400": true, "stream full": true}
	// JetStream down counts toward the breaker; one stream's refusal does
	// not, and a refusal that waits for a fix of the stream is neither.
	down := map[string]bool{"store failed": true, "insufficient resources": true, "js disabled": false}
	awaitsFix := map[string]bool{"no stream": true, "no responders": true, "stream mismatch": true, "sealed": true, "js disabled": true}
	for _, tt := range tests {
		r := classify(tt.ctx, tt.err)
		if r.Refused != refused[tt.name] {
			t.Errorf("%s: Refused=%v, want %v", tt.name, r.Refused, refused[tt.name])
		}
		if r.Down != down[tt.name] || r.AwaitsFix != awaitsFix[tt.name] {
			t.Errorf("%s: Down=%v AwaitsFix=%v, want %v %v", tt.name, r.Down, r.AwaitsFix, down[tt.name], awaitsFix[tt.name])
		}
		if r.Outcome != tt.outcome || r.NotSent != tt.notSent || r.Reason != tt.reason || r.Err == nil {
			t.Errorf("%s: %s NotSent=%v reason %q err %v; want %s NotSent=%v reason %q",
				tt.name, r.Outcome, r.NotSent, r.Reason, r.Err, tt.outcome, tt.notSent, tt.reason)
		}
	}
}
