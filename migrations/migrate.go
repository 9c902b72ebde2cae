package migrations

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"regexp"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"
)

// DefaultSchema is the schema drainer lives in unless --schema says otherwise.
const DefaultSchema = "drainer"

var schemaPattern = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// ValidateSchema checks that name is a plain lower-case SQL identifier, so it
// can be placed into statements unquoted.
func ValidateSchema(name string) error {
	if !schemaPattern.MatchString(name) {
		return fmt.Errorf("invalid schema name %q: use lower-case letters, digits and _ (at most 63, not starting with a digit)", name)
	}
	return nil
}

// Latest returns the number of the newest migration this build knows.
func Latest() int {
	names, err := migrate.FindMigrations(files)
	if err != nil {
		panic(fmt.Sprintf("embedded migrations are invalid: %v", err))
	}
	return len(names)
}

// Migrate applies every pending migration to schema, then installs the
// current definitions of its functions, views and triggers (code/) when the
// schema holds an older revision of them. It is idempotent and safe to run
// from many processes at once: the schema is created, and the definitions
// installed, under a transaction-scoped advisory lock, and tern serialises
// migrations under its own.
func Migrate(ctx context.Context, conn *pgx.Conn, schema string, log *slog.Logger) (applied int, err error) {
	if err := ValidateSchema(schema); err != nil {
		return 0, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey(schema)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+schema)
		return err
	}); err != nil {
		return 0, fmt.Errorf("create schema %s: %w", schema, err)
	}
	m, err := migrate.NewMigrator(ctx, conn, schema+".schema_version")
	if err != nil {
		return 0, fmt.Errorf("prepare migrations: %w", err)
	}
	m.Data["schema"] = schema
	if err := m.LoadMigrations(files); err != nil {
		return 0, fmt.Errorf("load migrations: %w", err)
	}
	before, err := m.GetCurrentVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	if int(before) > len(m.Migrations) {
		// A newer release migrated this schema; expand/contract keeps it usable.
		log.Info("schema is newer than this release", "schema", schema, "version", before, "known", len(m.Migrations))
		return 0, nil
	}
	// Count what this process applies: another may apply some while this
	// one waits for tern's lock.
	m.OnStart = func(seq int32, name, _, _ string) {
		applied++
		log.Info("applying migration", "schema", schema, "version", seq, "name", name)
	}
	if err := m.Migrate(ctx); err != nil {
		var pgErr migrate.MigrationPgError
		if errors.As(err, &pgErr) {
			return 0, fmt.Errorf("migration %s: %w", pgErr.MigrationName, pgErr.PgError)
		}
		return 0, fmt.Errorf("migrate: %w", err)
	}
	if _, err := installCode(ctx, conn, schema, log); err != nil {
		return applied, err
	}
	return applied, nil
}

// ErrSchemaNotReady is returned by Check when the schema must be migrated or
// needs a newer daemon.
var ErrSchemaNotReady = errors.New("schema not ready")

// Querier is the part of pgx shared by connections, pools and transactions.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Check reports whether this build can work on schema: it must be migrated to
// at least Latest(), and must not require a newer daemon.
func Check(ctx context.Context, q Querier, schema string) (version int, err error) {
	if err := ValidateSchema(schema); err != nil {
		return 0, err
	}
	var exists bool
	if err := q.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", schema+".schema_version").Scan(&exists); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	if !exists {
		return 0, fmt.Errorf("%w: schema %q is not migrated: run `drainer migrate --schema %s`", ErrSchemaNotReady, schema, schema)
	}
	if err := q.QueryRow(ctx, "SELECT version FROM "+schema+".schema_version").Scan(&version); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	latest := Latest()
	if version < latest {
		return version, fmt.Errorf("%w: schema %q is at version %d, this release needs %d: run `drainer migrate`", ErrSchemaNotReady, schema, version, latest)
	}
	var minText string
	if err := q.QueryRow(ctx, "SELECT value FROM "+schema+".schema_meta WHERE name = 'min_daemon_schema_version'").Scan(&minText); err != nil {
		return version, fmt.Errorf("read schema_meta: %w", err)
	}
	if minVersion, err := strconv.Atoi(minText); err == nil && minVersion > latest {
		return version, fmt.Errorf("%w: schema %q (version %d) needs a daemon that knows schema version %d or later; this release knows %d: upgrade drainer",
			ErrSchemaNotReady, schema, version, minVersion, latest)
	}
	// The numbered migrations and the code package commit apart: a schema
	// whose tables are this release's but whose functions and triggers are
	// not installed yet is not ready (a migrate is under way, or failed).
	var revText string
	if err := q.QueryRow(ctx, "SELECT coalesce(max(value), '0') FROM "+schema+".schema_meta WHERE name = 'code_revision'").Scan(&revText); err != nil {
		return version, fmt.Errorf("read schema_meta: %w", err)
	}
	if rev, _ := strconv.Atoi(revText); rev < CodeRevision {
		return version, fmt.Errorf("%w: schema %q holds functions of code revision %s, this release needs %d: run `drainer migrate`",
			ErrSchemaNotReady, schema, revText, CodeRevision)
	}
	return version, nil
}

func lockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("drainer.migrate." + schema))
	return int64(h.Sum64())
}
