package pgtable

import (
	"cmp"
	"errors"
	"regexp"
	"strings"
	"time"

	"github.com/drainer-io/drainer/dispatch/wire"
	"github.com/jackc/pgx/v5"
)

// Defaults applied by Config.WithDefaults.
const (
	DefaultTimeout = 10 * time.Second
	// DefaultMaxConns sizes the pool when neither MaxConns nor the DSN's
	// pool_max_conns is set: enough for the engine's default 16 workers.
	DefaultMaxConns = 16
)

// Config configures one postgres adapter instance.
type Config struct {
	// DSN is the connection string of the recipient database (URL or
	// key=value form; pgxpool's pool_* parameters are honoured). Its password
	// never appears in errors.
	DSN string
	// Table is the recipient table, "table" or "schema.table"; each part is
	// a plain identifier, used as written (quoted, so case-sensitive). An
	// unqualified name is looked up on the connection's search_path.
	Table string
	// Timeout bounds one attempt; the caller's deadline applies too.
	Timeout time.Duration
	// MaxConns caps the pool; 0 keeps the DSN's pool_max_conns, else
	// DefaultMaxConns.
	MaxConns int32
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
// MaxConns is resolved by New, which reads the DSN.
func (c Config) WithDefaults() Config {
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	return c
}

// identifier is a plain Postgres identifier (quoted identifiers are not
// accepted: they are rarely meant and easy to get wrong in YAML).
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]{0,62}$`)

// Validate reports every problem of c at once, each naming its field: the
// rules of the config file's keys (Settings.Check) and of the runtime
// fields. The messages never quote the DSN.
func (c Config) Validate() error {
	ch := wire.NewChecker(nil)
	(&Settings{DSN: wire.Secret(c.DSN), Table: c.Table}).Check(ch)
	if c.Timeout <= 0 {
		ch.Errorf("timeout", "must be positive, got %s", c.Timeout)
	}
	if c.MaxConns < 0 {
		ch.Errorf("max_conns", "must not be negative, got %d", c.MaxConns)
	}
	return ch.Errs.Err()
}

// parseTable splits "table" or "schema.table" into identifier parts.
func parseTable(name string) (pgx.Identifier, error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 || !identifier.MatchString(parts[0]) || (len(parts) == 2 && !identifier.MatchString(parts[1])) {
		return nil, errors.New(`must be a table name, optionally schema-qualified ("effects" or "app.effects"; letters, digits, _ and $)`)
	}
	return pgx.Identifier(parts), nil
}
