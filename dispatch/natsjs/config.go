package natsjs

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"time"
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

// Validate reports every problem of c at once, each naming its field. A
// server is named by its index, never quoted.
func (c Config) Validate() error {
	var errs []error
	if len(c.Servers) == 0 {
		errs = append(errs, errors.New("servers: at least one server URL is required"))
	}
	for i, s := range c.Servers {
		u, err := url.Parse(s)
		if err != nil || !slices.Contains([]string{"nats", "tls", "ws", "wss"}, u.Scheme) || u.Host == "" {
			errs = append(errs, fmt.Errorf("servers[%d]: must be a URL like nats://host:4222 (schemes nats, tls, ws, wss)", i))
		}
	}
	if _, err := parseSubject(c.Subject); err != nil {
		errs = append(errs, fmt.Errorf("subject: %w", err))
	}
	if c.Stream != "" && strings.ContainsAny(c.Stream, " \t\r\n.*>/\\") {
		errs = append(errs, fmt.Errorf(`stream: must be a stream name (no whitespace, ".", "*", ">", "/" or "\"), got %q`, c.Stream))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("timeout: must be positive, got %s", c.Timeout))
	}
	return errors.Join(errs...)
}
