package riverjob

import (
	"context"
	"strings"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/wire"
)

// The river adapter's config keys and their rules (docs/reference.md §4),
// and its registration as adapter type river.

// Settings are the keys of a river adapter in the config file.
type Settings struct {
	// DSN is the database River's tables live in; only a password in it
	// must come from a reference.
	DSN wire.Secret `yaml:"dsn" secret:"password"`
	// Queue is River's default queue when not written.
	Queue string `yaml:"queue"`
	// JobKind is DefaultJobKind when not written.
	JobKind string `yaml:"job_kind"`
	// Schema is the connection's search path when not written.
	Schema string `yaml:"schema"`
}

// Check reports every problem of the settings, with River's own rules for
// its names. Its messages never quote the DSN.
func (s *Settings) Check(c *wire.Checker) {
	c.Require("dsn", s.DSN == "")
	if f := "job_kind"; c.Set(f, s.JobKind == "") && c.Known(f) {
		if strings.TrimSpace(s.JobKind) == "" {
			c.Errorf(f, "must not be empty (leave it out for %s)", DefaultJobKind)
		} else if !kindName.MatchString(s.JobKind) {
			c.Errorf(f, "must be a River job kind (a letter, digit or _, then at least one more of those or -[]<>/.·:+), got %s", c.Quote(f, s.JobKind))
		}
	}
	if f := "queue"; c.Set(f, s.Queue == "") && c.Known(f) && (len(s.Queue) > 64 || !queueName.MatchString(s.Queue)) {
		c.Errorf(f, "must be a River queue name (at most 64 lower-case letters and digits, separated by _, - or |), got %s", c.Quote(f, s.Queue))
	}
	if f := "schema"; c.Set(f, s.Schema == "") && c.Known(f) && (len(s.Schema) > maxSchemaLength || !schemaName.MatchString(s.Schema)) {
		c.Errorf(f, "must be a schema name River accepts (a plain identifier of at most %d letters, digits and _), got %s", maxSchemaLength, c.Quote(f, s.Schema))
	}
}

// configure turns a river adapter's settings into its runtime config; its
// Start connects to the target database and checks River's migrations
// there, so a missing schema fails startup. A database that cannot be
// reached yet does not fail the start: the adapter connects in the
// background while its rows wait (no attempt consumed) and the other
// adapters drain. in.Logger, scoped to the adapter, gets River's own log
// lines.
func configure(in dispatch.BuildInput) (dispatch.Start, error) {
	s := in.Settings.(*Settings)
	c := Config{DSN: s.DSN.Reveal(), Queue: s.Queue, JobKind: s.JobKind, Schema: s.Schema, Timeout: in.Timeout, Logger: in.Logger}
	if err := c.WithDefaults().Validate(); err != nil {
		return nil, err
	}
	return dispatch.StartProbed(in.Logger,
		"river: database unreachable at startup; the other adapters drain, this one connects in the background",
		func() (*Adapter, error) { return open(c) },
		func(ctx context.Context, ad *Adapter) error { return ad.Probe(ctx) },
		func(ad *Adapter) { ad.StartInBackground(in.Logger) }), nil
}

func init() {
	dispatch.RegisterKind(dispatch.Kind{
		Type:        "river",
		NewSettings: func() dispatch.Settings { return new(Settings) },
		Configure:   configure,
	})
}
