package natsjs

import (
	"cmp"
	"log/slog"
	"time"

	"github.com/drainer-io/drainer/dispatch/wire"
)

// Defaults applied by Config.WithDefaults.
const (
	// DefaultTimeout bounds one attempt when Config.Timeout is zero.
	DefaultTimeout = 10 * time.Second
	// DefaultName is the connection name shown by the server's monitoring.
	DefaultName = "drainer"
)

// Config configures one nats adapter instance.
type Config struct {
	// Servers are the server URLs (nats://, tls://, ws://, wss://). They
	// may carry credentials (nats://user:pass@host): errors never quote them.
	Servers []string
	// Subject is published to; {tool_name} may stand for one whole token.
	Subject string
	// Stream, when set, is the stream that must capture Subject: checked by
	// New and sent as Nats-Expected-Stream on every publish.
	Stream string
	// RequireStream makes New fail when no stream captures Subject, instead
	// of logging it: set when the key TTL is read from that stream (a
	// config that leaves key_ttl unset).
	RequireStream bool
	// Timeout bounds one attempt (and connecting); the caller's deadline
	// applies too.
	Timeout time.Duration
	// Name is the connection name; "" means DefaultName.
	Name string
	// Logger receives connection events (disconnects, reconnects, async
	// errors); nil discards them.
	Logger *slog.Logger
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.Name = cmp.Or(c.Name, DefaultName)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports every problem of c at once, each naming its field: the
// rules of the config file's keys (Settings.Check) and of the runtime
// fields. A server is named by its index, never quoted.
func (c Config) Validate() error {
	ch := wire.NewChecker(nil)
	(&Settings{Servers: c.Servers, Subject: c.Subject, Stream: c.Stream}).Check(ch)
	if c.Timeout <= 0 {
		ch.Errorf("timeout", "must be positive, got %s", c.Timeout)
	}
	return ch.Errs.Err()
}
