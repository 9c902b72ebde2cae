package natsjs

import (
	"context"
	"net/url"
	"slices"
	"strings"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/wire"
)

// The nats adapter's config keys and their rules (docs/reference.md §4),
// and its registration as adapter type nats.

// Settings are the keys of a nats adapter in the config file.
type Settings struct {
	// Servers are server URLs; only a password in one must come from a
	// reference.
	Servers []string `yaml:"servers" secret:"password"`
	// Subject is published to; {tool_name} may stand for one whole token.
	Subject string `yaml:"subject"`
	// Stream is the JetStream stream expected to capture the subject.
	Stream string `yaml:"stream"`
}

// Check reports every problem of the settings. A server is named by its
// index, never quoted (it may carry credentials).
func (s *Settings) Check(c *wire.Checker) {
	if c.Require("servers", len(s.Servers) == 0) && len(s.Servers) == 0 {
		c.Errorf("servers", "must list at least one server")
	}
	for i, srv := range s.Servers {
		f := wire.Index("servers", i)
		if !c.Known(f) {
			continue
		}
		u, err := url.Parse(srv)
		if err != nil || !slices.Contains([]string{"nats", "tls", "ws", "wss"}, u.Scheme) || u.Host == "" {
			c.Errorf(f, "must be a server URL like nats://host:4222 (schemes nats, tls, ws, wss)")
		}
	}
	if c.Require("subject", s.Subject == "") {
		if _, err := parseSubject(s.Subject); err != nil && c.FromReference("subject") {
			c.Errorf("subject", "%s must be a NATS subject to publish to (dot-separated tokens, no spaces or wildcards)", c.Quote("subject", s.Subject))
		} else if err != nil {
			c.Errorf("subject", "must be a NATS subject to publish to: %v", err)
		}
	}
	if f := "stream"; c.Set(f, s.Stream == "") && c.Known(f) && (s.Stream == "" || strings.ContainsAny(s.Stream, " \t\r\n.*>/\\")) {
		c.Errorf(f, `must be a JetStream stream name (no whitespace, ".", "*", ">", "/" or "\"), got %s`, c.Quote(f, s.Stream))
	}
}

// configure turns a nats adapter's settings into its runtime config; its
// Start connects, and checks the expected stream when one is named. The
// connection is named "drainer/<adapter>" in the server's monitoring;
// in.Logger, scoped to the adapter, gets connection events.
func configure(in dispatch.BuildInput) (dispatch.Start, error) {
	s := in.Settings.(*Settings)
	c := Config{Servers: s.Servers, Subject: s.Subject, Stream: s.Stream, Timeout: in.Timeout,
		Name: "drainer/" + in.Name, Logger: in.Logger}
	if err := c.WithDefaults().Validate(); err != nil {
		return nil, err
	}
	return dispatch.StartWith(func(ctx context.Context) (*Adapter, error) { return New(ctx, c) }), nil
}

func init() {
	dispatch.RegisterKind(dispatch.Kind{
		Type:        "nats",
		NewSettings: func() dispatch.Settings { return new(Settings) },
		Configure:   configure,
	})
}
