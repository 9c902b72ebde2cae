package natsjs

import (
	"context"
	"errors"
	"fmt"
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
//
// With key_ttl set, a server that cannot be reached yet does not fail the
// start: the adapter connects in the background while its rows wait (no
// attempt consumed) and the other adapters drain. Without it, the window
// must be read from the stream before the adapter can be used: the start
// fails with dispatch.ErrUnavailable, which the daemon waits out (with
// backoff) before it drains, as it waits for its database.
func configure(in dispatch.BuildInput) (dispatch.Start, error) {
	s := in.Settings.(*Settings)
	c := Config{Servers: s.Servers, Subject: s.Subject, Stream: s.Stream, RequireStream: in.KeyTTL == 0,
		Timeout: in.Timeout, Name: "drainer/" + in.Name, Logger: in.Logger}
	if err := c.WithDefaults().Validate(); err != nil {
		return nil, err
	}
	if in.KeyTTL == 0 {
		return dispatch.StartWith(func(ctx context.Context) (*Adapter, error) {
			a, err := New(ctx, c)
			if errors.Is(err, dispatch.ErrUnavailable) {
				err = fmt.Errorf("%w (key_ttl is not set: the stream's duplicate window is read before anything drains; set key_ttl to let the other adapters drain meanwhile)", err)
			}
			return a, err
		}), nil
	}
	return dispatch.StartProbed(in.Logger,
		"nats: server unreachable at startup; the other adapters drain, this one connects in the background",
		func() (*Adapter, error) { return build(c) },
		func(ctx context.Context, ad *Adapter) error { return ad.Probe(ctx) },
		func(ad *Adapter) { ad.StartInBackground(in.Logger) }), nil
}

func init() {
	dispatch.RegisterKind(dispatch.Kind{
		Type:        "nats",
		NewSettings: func() dispatch.Settings { return new(Settings) },
		Configure:   configure,
		CheckRoute:  checkRoute,
	})
}

// checkRoute refuses a route whose tool name cannot be the {tool_name}
// token of the adapter's subject (a dot, a wildcard, a space): its rows
// could never be published, and it is known from the config alone.
func checkRoute(c *wire.Checker, adapter string, ds dispatch.Settings, r dispatch.RouteSpec) {
	s := ds.(*Settings)
	subj, err := parseSubject(s.Subject)
	if err != nil || !subj.templated() {
		return
	}
	if err := checkToken(r.Tool); err != nil {
		c.KeyErrorf("", "tool name %q cannot be the {tool_name} token of adapters.%s.subject %q: %v; its rows could never be published", r.Tool, adapter, s.Subject, err)
	}
}
