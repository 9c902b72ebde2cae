package pgtable

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

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

// identifier is a plain Postgres identifier, as config accepts for table.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]{0,62}$`)

// Validate reports every problem of c at once, each naming its field. The
// messages never quote the DSN.
func (c Config) Validate() error {
	var errs []error
	if strings.TrimSpace(c.DSN) == "" {
		errs = append(errs, errors.New("dsn: required"))
	}
	if _, err := parseTable(c.Table); err != nil {
		errs = append(errs, fmt.Errorf("table: %w", err))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("timeout: must be positive, got %s", c.Timeout))
	}
	if c.MaxConns < 0 {
		errs = append(errs, fmt.Errorf("max_conns: must not be negative, got %d", c.MaxConns))
	}
	return errors.Join(errs...)
}

// parseTable splits "table" or "schema.table" into identifier parts.
func parseTable(name string) (pgx.Identifier, error) {
	if name == "" {
		return nil, errors.New("required")
	}
	parts := strings.Split(name, ".")
	if len(parts) > 2 || !identifier.MatchString(parts[0]) || (len(parts) == 2 && !identifier.MatchString(parts[1])) {
		return nil, fmt.Errorf(`must be a table name, optionally schema-qualified ("effects" or "app.effects"; letters, digits, _ and $), got %q`, name)
	}
	return pgx.Identifier(parts), nil
}
