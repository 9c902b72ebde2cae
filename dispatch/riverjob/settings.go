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
	Queue   string `yaml:"queue"`
	JobKind string `yaml:"job_kind"`
	// Schema is the connection's search path when not written.
	Schema string `yaml:"schema"`
}

// Check reports every problem of the settings, with River's own rules for
// its names. Its messages never quote the DSN.
func (s *Settings) Check(c *wire.Checker) {
	c.Require("dsn", s.DSN == "")
	if f := "job_kind"; c.Require(f, s.JobKind == "") && strings.TrimSpace(s.JobKind) == "" {
		c.Errorf(f, "must not be empty")
	} else if c.Known(f) && s.JobKind != "" && !kindName.MatchString(s.JobKind) {
		c.Errorf(f, "must be a River job kind (a letter, digit or _, then at least one more of those or -[]<>/.·:+), got %s", c.Quote(f, s.JobKind))
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
// there, so a missing schema fails startup. in.Logger, scoped to the
// adapter, gets River's own log lines.
func configure(in dispatch.BuildInput) (dispatch.Start, error) {
	s := in.Settings.(*Settings)
	c := Config{DSN: s.DSN.Reveal(), Queue: s.Queue, JobKind: s.JobKind, Schema: s.Schema, Timeout: in.Timeout, Logger: in.Logger}
	if err := c.WithDefaults().Validate(); err != nil {
		return nil, err
	}
	return dispatch.StartWith(func(ctx context.Context) (*Adapter, error) { return New(ctx, c) }), nil
}

func init() {
	dispatch.RegisterKind(dispatch.Kind{
		Type:        "river",
		NewSettings: func() dispatch.Settings { return new(Settings) },
		Configure:   configure,
	})
}
