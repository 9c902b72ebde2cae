package mcp

import (
	"cmp"
	"log/slog"
	"net/http"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/wire"
)

// DefaultTimeout bounds one attempt when Config.Timeout is zero.
const DefaultTimeout = 30 * time.Second

// DefaultMessageLimit bounds the bytes read of one JSON-RPC message from the
// server. A larger answer is refused (terminal) without being read further.
const DefaultMessageLimit = 16 << 20

// DefaultRecordLimit bounds a tool result's record (Config.RecordLimit):
// 1 MiB, the payload limit of drainer.enqueue.
const DefaultRecordLimit = 1 << 20

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
	// RecordLimit bounds the record of a tool result kept for the gateway's
	// replays (Record); 0 means DefaultRecordLimit.
	RecordLimit int
	// MessageLimit bounds the bytes read of one server message; 0 means DefaultMessageLimit.
	MessageLimit int
	// AnswerBudget bounds the tools/call answers larger than 256 KiB read
	// at once: AnswerBudget / MessageLimit of them, at least one (budget.go);
	// 0 means DefaultAnswerBudget.
	AnswerBudget int
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
	c.RecordLimit = cmp.Or(c.RecordLimit, DefaultRecordLimit)
	c.MessageLimit = cmp.Or(c.MessageLimit, DefaultMessageLimit)
	c.AnswerBudget = cmp.Or(c.AnswerBudget, DefaultAnswerBudget)
	c.UserAgent = cmp.Or(c.UserAgent, "drainer")
	c.ClientVersion = cmp.Or(c.ClientVersion, "dev")
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports every problem of c at once, each naming its field: the
// rules of the config file's keys (Settings.Check) and of the runtime
// fields. It never quotes the URL or a header value.
func (c Config) Validate() error {
	ch := wire.NewChecker(nil)
	(&Settings{URL: c.URL, Headers: wire.Hide(c.Headers)}).Check(ch)
	if c.Timeout <= 0 {
		ch.Errorf("timeout", "must be positive, got %s", c.Timeout)
	}
	if c.ResponseLimit < 0 {
		ch.Errorf("response_limit", "must not be negative, got %d", c.ResponseLimit)
	}
	if c.AnswerBudget < 0 {
		ch.Errorf("answer_budget", "must not be negative, got %d", c.AnswerBudget)
	}
	if c.MessageLimit < 0 {
		ch.Errorf("message_limit", "must not be negative, got %d", c.MessageLimit)
	}
	return ch.Errs.Err()
}
