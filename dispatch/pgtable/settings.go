package pgtable

import (
	"context"
	"math"
	"strings"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/wire"
)

// The postgres adapter's config keys and their rules (docs/reference.md
// §4), and its registration as adapter type postgres.

// Settings are the keys of a postgres adapter in the config file.
type Settings struct {
	// DSN is the recipient database's connection string; only a password in
	// it must come from a reference.
	DSN wire.Secret `yaml:"dsn" secret:"password"`
	// Table receives the rows: "table" or "schema.table".
	Table string `yaml:"table"`
}

// Check reports every problem of the settings. Its messages never quote
// the DSN.
func (s *Settings) Check(c *wire.Checker) {
	blank := strings.TrimSpace(s.DSN.Reveal()) == ""
	if c.Require("dsn", blank) && blank {
		c.Errorf("dsn", "must not be blank")
	}
	if c.Require("table", s.Table == "") {
		if _, err := parseTable(s.Table); err != nil {
			c.Errorf("table", "%v, got %s", err, c.Quote("table", s.Table))
		}
	}
}

// configure turns a postgres adapter's settings into its runtime config;
// its Start connects to the DSN (revealed here, at the last step) and
// checks that the table can receive rows, so a missing table fails at
// startup, not at the first row. A database that cannot be reached yet
// does not fail the start: the adapter connects in the background while
// its rows wait (no attempt consumed) and the other adapters drain.
// max_concurrency, when set, sizes the connection pool.
func configure(in dispatch.BuildInput) (dispatch.Start, error) {
	s := in.Settings.(*Settings)
	c := Config{DSN: s.DSN.Reveal(), Table: s.Table, Timeout: in.Timeout,
		MaxConns: int32(min(max(in.MaxConcurrency, 0), math.MaxInt32))}
	if err := c.WithDefaults().Validate(); err != nil {
		return nil, err
	}
	return dispatch.StartProbed(in.Logger,
		"postgres: database unreachable at startup; the other adapters drain, this one connects in the background",
		func() (*Adapter, error) { return open(c) },
		func(ctx context.Context, ad *Adapter) error { return ad.Probe(ctx) },
		func(ad *Adapter) { ad.StartInBackground(in.Logger) }), nil
}

func init() {
	dispatch.RegisterKind(dispatch.Kind{
		Type:        "postgres",
		NewSettings: func() dispatch.Settings { return new(Settings) },
		Configure:   configure,
	})
}
