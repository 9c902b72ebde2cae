package kafka

import (
	"context"
	"slices"
	"strings"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/wire"
)

// The kafka adapter's config keys and their rules (docs/reference.md §4),
// and its registration as adapter type kafka.

// Settings are the keys of a kafka adapter in the config file.
type Settings struct {
	// Brokers are the seed brokers, host:port each; an entry may hold a
	// comma-separated list (one ${env:} variable for all of them).
	Brokers []string `yaml:"brokers"`
	// Topic is a name, or a template with {tool_name}.
	Topic string `yaml:"topic"`
	// TLS, when written (tls: {} included), connects with TLS.
	TLS *TLS `yaml:"tls"`
	// SASL, when written, authenticates.
	SASL *SASL `yaml:"sasl"`
}

// Check reports every problem of the settings: broker addresses, the topic
// template, the TLS files in pairs, SASL's mechanism and credentials.
func (s *Settings) Check(c *wire.Checker) {
	if c.Require("brokers", len(s.Brokers) == 0) && len(s.Brokers) == 0 {
		c.Errorf("brokers", "must list at least one broker (host:port)")
	}
	for i, b := range s.Brokers {
		if f := wire.Index("brokers", i); c.Known(f) {
			checkBrokers(c, f, b)
		}
	}
	if c.Require("topic", s.Topic == "") {
		if _, err := ParseTopic(s.Topic); err != nil && c.FromReference("topic") {
			c.Errorf("topic", "%s must be a topic name, or a template with {tool_name}", c.Quote("topic", s.Topic))
		} else if err != nil {
			c.Errorf("topic", "%v", err)
		}
	}
	if t := s.TLS; t != nil && (t.CertFile == "") != (t.KeyFile == "") {
		c.KeyErrorf("tls", "cert_file and key_file go together (a client certificate and its key)")
	} else if t != nil && c.CheckMode {
		// The files are read where the daemon runs: on this machine, one
		// that cannot be read is a warning, as a plugin's executable is.
		if _, err := t.Config(); err != nil {
			c.Warnf("tls", "on this machine, %v: drainer run would refuse to start the adapter", err)
		}
	}
	if a := s.SASL; a != nil {
		if f := "sasl.mechanism"; c.Require(f, a.Mechanism == "") && !slices.Contains(Mechanisms(), a.Mechanism) {
			c.Errorf(f, "must be one of %s, got %s", strings.Join(Mechanisms(), ", "), c.Quote(f, a.Mechanism))
		}
		c.Require("sasl.username", a.Username == "")
		c.Require("sasl.password", a.Password == "")
	}
}

// checkBrokers checks one brokers entry: host:port, or a comma-separated
// list of them.
func checkBrokers(c *wire.Checker, path, entry string) {
	for part := range strings.SplitSeq(entry, ",") {
		if err := CheckBroker(strings.TrimSpace(part)); err != nil {
			if c.FromReference(path) {
				c.Errorf(path, "%s must be host:port, or a comma-separated list of them", c.Quote(path, entry))
			} else {
				c.Errorf(path, "%v", err)
			}
			return
		}
	}
}

// checkRoute checks, for a topic template, the topic of a route the
// adapter serves: a tool name that makes an invalid topic is an error at
// the route.
func checkRoute(c *wire.Checker, adapter string, ds dispatch.Settings, r dispatch.RouteSpec) {
	topic, err := ParseTopic(ds.(*Settings).Topic)
	if err != nil || !topic.Templated() {
		return // an invalid topic is reported at the adapter
	}
	if _, err := topic.Expand(r.Tool); err != nil {
		c.KeyErrorf("", "adapter %s cannot write this route: %v", adapter, err)
	}
}

// configure turns a kafka adapter's settings into its runtime config. Its
// Start asks the brokers for their metadata once. Brokers that cannot be
// reached yet do not fail the start: the adapter keeps trying in the
// background while its rows wait (no attempt consumed) and the other
// adapters drain. A refusal (SASL, TLS) does.
func configure(in dispatch.BuildInput) (dispatch.Start, error) {
	s := in.Settings.(*Settings)
	c := Config{Brokers: s.Brokers, Topic: s.Topic, TLS: s.TLS, SASL: s.SASL, Timeout: in.Timeout,
		ClientID: "drainer/" + in.Name, Logger: in.Logger}
	if err := c.WithDefaults().Validate(); err != nil {
		return nil, err
	}
	return dispatch.StartProbed(in.Logger,
		"kafka: no broker reachable at startup; the other adapters drain, this one connects in the background",
		func() (*Adapter, error) { return New(c) },
		func(ctx context.Context, ad *Adapter) error { return ad.Probe(ctx) },
		func(ad *Adapter) { ad.StartInBackground(in.Logger) }), nil
}

func init() {
	dispatch.RegisterKind(dispatch.Kind{
		Type:          "kafka",
		DefaultKeyTTL: DefaultKeyTTL,
		NewSettings:   func() dispatch.Settings { return new(Settings) },
		CheckRoute:    checkRoute,
		Configure:     configure,
	})
}
