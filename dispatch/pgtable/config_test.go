package pgtable

import (
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
)

func TestConfigValidate(t *testing.T) {
	const secret = "pw-s3cr3t"
	valid := Config{DSN: "postgres://u:" + secret + "@db/x", Table: "effects"}.WithDefaults()
	tests := []struct {
		name string
		edit func(*Config)
		want []string
	}{
		{"valid", func(*Config) {}, nil},
		{"qualified", func(c *Config) { c.Table = "app_1.Effects$2" }, nil},
		{"missing dsn", func(c *Config) { c.DSN = " " }, []string{"dsn: required"}},
		{"missing table", func(c *Config) { c.Table = "" }, []string{"table: required"}},
		{"three parts", func(c *Config) { c.Table = "db.app.effects" }, []string{`table: must be a table name, optionally schema-qualified ("effects" or "app.effects"; letters, digits, _ and $), got "db.app.effects"`}},
		{"injection", func(c *Config) { c.Table = `effects; DROP TABLE x` }, []string{"table: must be a table name"}},
		{"quoted", func(c *Config) { c.Table = `"effects"` }, []string{"table: must be a table name"}},
		{"digit first", func(c *Config) { c.Table = "1effects" }, []string{"table: must be a table name"}},
		{"empty schema", func(c *Config) { c.Table = ".effects" }, []string{"table: must be a table name"}},
		{"too long", func(c *Config) { c.Table = strings.Repeat("a", 64) }, []string{"table: must be a table name"}},
		{"timeout", func(c *Config) { c.Timeout = -time.Second }, []string{"timeout: must be positive, got -1s"}},
		{"max conns", func(c *Config) { c.MaxConns = -1 }, []string{"max_conns: must not be negative"}},
		{"all at once", func(c *Config) { c.DSN, c.Table, c.Timeout = "", "", 0 }, []string{"dsn: required", "table: required", "timeout"}},
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
			if joined, ok := err.(interface{ Unwrap() []error }); !ok || len(joined.Unwrap()) != len(tt.want) {
				t.Errorf("want %d joined errors, got %q", len(tt.want), err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("reveals the DSN: %q", err)
			}
		})
	}
}

func TestClassifySQLState(t *testing.T) {
	for code, want := range map[string]struct {
		outcome dispatch.Outcome
		reason  string
	}{
		"40001": {dispatch.Retry, ReasonTxConflict}, "40P01": {dispatch.Retry, ReasonTxConflict}, "55P03": {dispatch.Retry, ReasonTxConflict},
		"08006": {dispatch.Retry, ReasonUnavailable}, "08001": {dispatch.Retry, ReasonUnavailable}, "57P01": {dispatch.Retry, ReasonUnavailable},
		"57P03": {dispatch.Retry, ReasonUnavailable}, "53300": {dispatch.Retry, ReasonUnavailable}, "53100": {dispatch.Retry, ReasonUnavailable},
		"58030": {dispatch.Retry, ReasonUnavailable}, "25006": {dispatch.Retry, ReasonUnavailable},
		"57014": {dispatch.Retry, ReasonStatementCancel},
		"42P01": {dispatch.Terminal, ReasonSchema}, "42703": {dispatch.Terminal, ReasonSchema}, "42501": {dispatch.Auth, dispatch.ReasonAuth}, "28P01": {dispatch.Auth, dispatch.ReasonAuth},
		"23514": {dispatch.Terminal, ReasonConstraint}, "23505": {dispatch.Terminal, ReasonConstraint}, "23503": {dispatch.Terminal, ReasonConstraint},
		"22P02": {dispatch.Terminal, ReasonData}, "22001": {dispatch.Terminal, ReasonData},
		"P0001": {dispatch.Terminal, ReasonSQL}, "XX000": {dispatch.Terminal, ReasonSQL}, "0A000": {dispatch.Terminal, ReasonSQL},
	} {
		if o, r := classifySQLState(code); o != want.outcome || r != want.reason {
			t.Errorf("%s: %s/%s, want %s/%s", code, o, r, want.outcome, want.reason)
		}
	}
}
