package migrations

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

// DefaultLockTimeout is how long each statement of a migration step waits
// for a table lock (its lock_timeout) before the step is rolled back and
// tried again. A live drain's claims, completions and enqueues queue behind
// a waiting DDL statement, so this bounds how long they stall: keep it well
// under their statement_timeout.
const DefaultLockTimeout = 2 * time.Second

// DefaultLockWait is how long Migrate keeps retrying a step whose table
// locks other sessions hold before it gives up.
const DefaultLockWait = 5 * time.Minute

// The pause between tries of a step that could not take its locks grows
// from lockRetryBase, doubling, to lockRetryCap, each drawn between half
// and all of that.
const (
	lockRetryBase = 500 * time.Millisecond
	lockRetryCap  = 30 * time.Second
)

// lockNotAvailable is the SQLSTATE of a lock wait cut off by lock_timeout.
const lockNotAvailable = "55P03"

// Options tune how Migrate waits for the locks its statements take.
type Options struct {
	// LockTimeout bounds each wait of a step's statements for a lock (the
	// step's transaction runs with SET LOCAL lock_timeout); at least 1ms.
	LockTimeout time.Duration
	// LockWait bounds how long a step that could not take its locks is
	// retried, with growing jittered pauses; 0 tries once.
	LockWait time.Duration
	// Log receives the progress and each retry (nil: none).
	Log *slog.Logger
}

// DefaultOptions are the options Migrate uses.
func DefaultOptions(log *slog.Logger) Options {
	return Options{LockTimeout: DefaultLockTimeout, LockWait: DefaultLockWait, Log: log}
}

// Result is what MigrateReport did to a schema.
type Result struct {
	// Applied counts the migrations this process applied (another process
	// may have applied some of the others meanwhile).
	Applied int
	// Version is the schema's version afterwards: Latest(), or a newer
	// release's when one migrated the schema (nothing is applied then:
	// expand/contract keeps it usable by this release's daemon unless its
	// schema_meta says otherwise, which Check reports).
	Version int
}

// Newer reports whether a newer release than this one migrated the schema.
func (r Result) Newer() bool { return r.Version > Latest() }

// Migrate is MigrateWith with DefaultOptions.
func Migrate(ctx context.Context, conn *pgx.Conn, schema string, log *slog.Logger) (applied int, err error) {
	return MigrateWith(ctx, conn, schema, DefaultOptions(log))
}

// MigrateWith applies every pending migration to schema, then installs the
// current definitions of its functions, views and triggers (code/) when the
// schema holds an older revision of them. It is idempotent and safe to run
// from many processes at once: the schema is created, and the definitions
// installed, under a transaction-scoped advisory lock, and tern serialises
// migrations under its own.
//
// Each step (a numbered migration, the code package) is one transaction
// whose statements wait at most opts.LockTimeout for a table lock, so that
// a session holding one (a producer's open transaction) never makes the
// live drain queue behind a waiting ALTER TABLE for longer than that. A
// step cut off that way is rolled back and tried again until opts.LockWait
// has passed; then MigrateWith returns a *LockWaitError naming the sessions
// that held the locks, the steps committed before it staying applied. The
// lock_timeout is local to each step's transaction: conn keeps its own.
func MigrateWith(ctx context.Context, conn *pgx.Conn, schema string, opts Options) (applied int, err error) {
	r, err := MigrateReport(ctx, conn, schema, opts)
	return r.Applied, err
}

// MigrateReport is MigrateWith, and also reports the schema's version
// afterwards (Result.Version), a newer release's included.
func MigrateReport(ctx context.Context, conn *pgx.Conn, schema string, opts Options) (r Result, err error) {
	if err := ValidateSchema(schema); err != nil {
		return r, err
	}
	if opts.LockTimeout < time.Millisecond || opts.LockWait < 0 {
		return r, fmt.Errorf("migrate: lock timeout must be at least 1ms and lock wait not negative (got %s and %s)", opts.LockTimeout, opts.LockWait)
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	start := time.Now()
	for try := 1; ; try++ {
		n, version, step, err := migrateOnce(ctx, conn, schema, opts.LockTimeout, log)
		r.Applied += n
		r.Version = version
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != lockNotAvailable {
			return r, err
		}
		w := inspectLockWait(ctx, conn, schema, opts.LockTimeout)
		left := opts.LockWait - time.Since(start)
		if left <= 0 {
			return r, &LockWaitError{Database: w.database, Schema: schema, Step: step, Version: w.version,
				Waited: time.Since(start), Tries: try, LockTimeout: opts.LockTimeout, Holders: w.holders}
		}
		pause := min(retryPause(try), left)
		attrs := []any{"schema", schema, "current_database", w.database, "step", step, "try", try,
			"lock_timeout", opts.LockTimeout, "waited", time.Since(start).Round(time.Millisecond), "retry_in", pause.Round(time.Millisecond)}
		log.Warn("migration step could not take its table locks in time: rolled back, retrying", append(attrs, w.holderAttrs()...)...)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return r, fmt.Errorf("%s: waiting to retry: %w", step, ctx.Err())
		case <-t.C:
		}
	}
}

// retryPause is the pause before try+1: growing from lockRetryBase to
// lockRetryCap, drawn between half and all of it.
func retryPause(try int) time.Duration {
	d := min(lockRetryCap, lockRetryBase<<min(try-1, 16))
	return d/2 + rand.N(d/2+1)
}

// migrateOnce makes one pass of MigrateWith: the numbered migrations, then
// the code package. version is the schema's version once it succeeded
// (a newer release's, untouched, included); step names the step that
// failed, if one did.
func migrateOnce(ctx context.Context, conn *pgx.Conn, schema string, lockTimeout time.Duration, log *slog.Logger) (applied, version int, step string, err error) {
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey(schema)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+schema)
		return err
	}); err != nil {
		return 0, 0, "create schema", fmt.Errorf("create schema %s: %w", schema, err)
	}
	m, err := migrate.NewMigrator(ctx, conn, schema+".schema_version")
	if err != nil {
		return 0, 0, "prepare migrations", fmt.Errorf("prepare migrations: %w", err)
	}
	m.Data["schema"] = schema
	if err := m.LoadMigrations(files); err != nil {
		return 0, 0, "load migrations", fmt.Errorf("load migrations: %w", err)
	}
	before, err := m.GetCurrentVersion(ctx)
	if err != nil {
		return 0, 0, "read schema version", fmt.Errorf("read schema version: %w", err)
	}
	if int(before) > len(m.Migrations) {
		// A newer release migrated this schema; expand/contract keeps it usable.
		log.Info("schema is newer than this release; nothing applied", "schema", schema, "version", before, "known", len(m.Migrations))
		return 0, int(before), "", nil
	}
	// tern runs each migration as one statement string in its own
	// transaction (none of ours disables that), so SET LOCAL bounds every
	// lock wait of the migration and ends with its transaction.
	setTimeout := lockTimeoutSQL(lockTimeout)
	for _, mig := range m.Migrations {
		mig.UpSQL = setTimeout + "\n" + mig.UpSQL
	}
	// Count what this process applies: another may apply some while this
	// one waits for tern's lock. The last one started did not commit if
	// Migrate fails.
	started := 0
	m.OnStart = func(seq int32, name, _, _ string) {
		started++
		step = "migration " + name
		log.Info("applying migration", "schema", schema, "version", seq, "name", name)
	}
	codeStep := fmt.Sprintf("code revision %d (functions, views and triggers)", CodeRevision)
	if before < unwritableFrom && len(m.Migrations) >= unwritableFrom {
		// Every pending migration and the code package in one transaction.
		if err := applyWithCode(ctx, conn, schema, m.Migrations, lockTimeout, log, m.OnStart, &step, codeStep); err != nil {
			step = fmt.Sprintf("%s, one transaction with every migration up to %d and the code package,", step, len(m.Migrations))
			if errors.As(err, new(migrate.MigrationPgError)) {
				err = migrationError(err)
			}
			return 0, int(before), step, err
		}
		return started, len(m.Migrations), "", nil
	}
	if err := m.Migrate(ctx); err != nil {
		return max(started-1, 0), int(before), cmp.Or(step, "migrations"), migrationError(err)
	}
	if _, err := installCode(ctx, conn, schema, lockTimeout, log); err != nil {
		return started, len(m.Migrations), codeStep, err
	}
	return started, len(m.Migrations), "", nil
}

// migrationError words an error of a numbered migration.
func migrationError(err error) error {
	var pgErr migrate.MigrationPgError
	if errors.As(err, &pgErr) {
		return fmt.Errorf("migration %s: %w", pgErr.MigrationName, pgErr.PgError)
	}
	return fmt.Errorf("migrate: %w", err)
}

// unwritableFrom is the first migration that leaves the queue unwritable
// until the code package is installed: 020 partitions the queue, and its
// trigger queue_migrating refuses every write (SQLSTATE 55000) until the
// code package drops it. A failure, a lock wait given up or a kill between
// the two would leave every producer and replica refused until migrate ran
// again. A schema older than it is therefore migrated in one transaction,
// its pending migrations with the code package (applyWithCode): the
// trigger is never seen committed.
const unwritableFrom = 20

// ternLock is the advisory lock tern's migrator takes (its unexported
// lockNum): taken for the transaction of applyWithCode, so that no
// migrator of this release or an older one reads the version before it
// commits.
const ternLock = int64(9628173550095224)

// applyWithCode applies the migrations after the schema's version and the
// code package in one transaction, under tern's lock. onStart and step
// report progress as tern's OnStart does; codeStep names the code package.
func applyWithCode(ctx context.Context, conn *pgx.Conn, schema string, migs []*migrate.Migration, lockTimeout time.Duration,
	log *slog.Logger, onStart func(int32, string, string, string), step *string, codeStep string) error {
	sql, sum, err := Code(schema)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", ternLock); err != nil {
			return err
		}
		var version int32
		if err := tx.QueryRow(ctx, "SELECT version FROM "+schema+".schema_version").Scan(&version); err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		for _, mig := range migs[min(int(version), len(migs)):] {
			onStart(mig.Sequence, mig.Name, "up", mig.UpSQL)
			if _, err := tx.Exec(ctx, mig.UpSQL); err != nil {
				var pgErr *pgconn.PgError
				if errors.As(err, &pgErr) {
					return migrate.MigrationPgError{MigrationName: mig.Name, Sql: mig.UpSQL, PgError: pgErr}
				}
				return err
			}
			if _, err := tx.Exec(ctx, "UPDATE "+schema+".schema_version SET version = $1", mig.Sequence); err != nil {
				return err
			}
		}
		*step = codeStep
		_, err := installCodeTx(ctx, tx, schema, sql, sum, lockTimeout, log)
		return err
	})
}

// lockTimeoutSQL sets lock_timeout for the rest of the transaction.
func lockTimeoutSQL(d time.Duration) string {
	return fmt.Sprintf("SET LOCAL lock_timeout = %d;", max(d.Milliseconds(), 1))
}

// ErrSchemaNotReady is returned by Check when the schema must be migrated or
// needs a newer daemon.
var ErrSchemaNotReady = errors.New("schema not ready")

// ErrDaemonTooOld is the ErrSchemaNotReady of a schema that needs a newer
// release: no migrate helps, an upgrade does.
var ErrDaemonTooOld = fmt.Errorf("%w: this release is too old for the schema", ErrSchemaNotReady)

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
			ErrDaemonTooOld, schema, version, minVersion, latest)
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

// LockWaitError is returned by MigrateWith when a step could not take its
// table locks before the lock wait ran out. The step was rolled back: the
// schema is as the steps before it left it (Version).
type LockWaitError struct {
	Database, Schema string
	// Step names what waited, e.g. "migration 026_queue_payload_bytes.sql".
	Step string
	// Version is the schema's migration version after the failure (-1 if
	// it could not be read).
	Version     int
	Waited      time.Duration
	Tries       int
	LockTimeout time.Duration
	// Holders are the sessions that held locks on the schema's tables, at
	// least for LockTimeout, when the last try gave up: oldest transaction
	// first.
	Holders []LockHolder
}

func (e *LockWaitError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "database %q, schema %s: %s could not take its table locks within %s (%d tries, each waiting up to %s)",
		e.Database, e.Schema, e.Step, e.Waited.Round(time.Millisecond), e.Tries, e.LockTimeout)
	if len(e.Holders) == 0 {
		b.WriteString("; no session was found holding a lock on the schema's tables that long")
	} else {
		b.WriteString("; locks held by ")
		for i, h := range e.Holders {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(h.String())
		}
	}
	b.WriteString("; that step was rolled back")
	if e.Version >= 0 {
		fmt.Fprintf(&b, " (the schema is at version %d)", e.Version)
	}
	b.WriteString(": end or commit the session holding the locks, then run drainer migrate again")
	return b.String()
}

// LockHolder is a session holding locks on tables of the schema.
type LockHolder struct {
	PID int
	// State is pg_stat_activity.state ("idle in transaction", "active",
	// …); empty, like the fields below, where the role may not see it.
	State           string
	ApplicationName string
	// XactAge is how long its transaction had been open.
	XactAge time.Duration
	// Relations are the tables it held locks on (a partition named by its
	// partitioned table).
	Relations []string
}

func (h LockHolder) String() string {
	return fmt.Sprintf("pid %d (%s, transaction open %s, application_name %q, on %s)",
		h.PID, cmp.Or(h.State, "state not visible"), h.XactAge.Round(time.Millisecond), h.ApplicationName, strings.Join(h.Relations, ", "))
}

// lockWait is what inspectLockWait found.
type lockWait struct {
	database string
	version  int
	holders  []LockHolder
}

// holderAttrs are the log attributes of the oldest holder.
func (w lockWait) holderAttrs() []any {
	if len(w.holders) == 0 {
		return []any{"holder", "none found holding a lock on the schema's tables that long"}
	}
	h := w.holders[0]
	return []any{"holder_pid", h.PID, "holder_state", h.State, "holder_xact_age", h.XactAge.Round(time.Millisecond),
		"holder_application_name", h.ApplicationName, "holder_relations", strings.Join(h.Relations, ","), "holders", len(w.holders)}
}

// lockHoldersSQL lists the other sessions holding locks on tables of the
// schema ($1) in a transaction open at least $2 seconds: a step cut off by
// lock_timeout waited that long behind one of them. Oldest first.
const lockHoldersSQL = `
SELECT l.pid, coalesce(a.state, ''), coalesce(a.application_name, ''),
       coalesce(extract(epoch FROM clock_timestamp() - a.xact_start), 0)::float8,
       array_agg(DISTINCT t.relname ORDER BY t.relname)
  FROM pg_locks l
  JOIN pg_class c ON c.oid = l.relation
  JOIN pg_class t ON t.oid = coalesce(pg_partition_root(c.oid), c.oid)
  LEFT JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'relation' AND l.granted
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1)
   AND c.relkind IN ('r', 'p')
   AND l.pid <> pg_backend_pid()
   AND (a.xact_start IS NULL OR a.xact_start <= clock_timestamp() - $2::float8 * interval '1 second')
 GROUP BY l.pid, a.state, a.application_name, a.xact_start
 ORDER BY a.xact_start NULLS LAST, l.pid
 LIMIT 5`

// inspectLockWait reads, after a step was cut off by lock_timeout, the
// database's name, the schema's version and who held locks on its tables.
// What cannot be read is left out: it only explains the wait.
func inspectLockWait(ctx context.Context, conn *pgx.Conn, schema string, lockTimeout time.Duration) lockWait {
	w := lockWait{database: conn.Config().Database, version: -1}
	_ = conn.QueryRow(ctx, "SELECT current_database()").Scan(&w.database)
	_ = conn.QueryRow(ctx, "SELECT version FROM "+schema+".schema_version").Scan(&w.version)
	rows, err := conn.Query(ctx, lockHoldersSQL, schema, lockTimeout.Seconds())
	if err != nil {
		return w
	}
	var h LockHolder
	var age float64
	_, _ = pgx.ForEachRow(rows, []any{&h.PID, &h.State, &h.ApplicationName, &age, &h.Relations}, func() error {
		h.XactAge = time.Duration(age * float64(time.Second))
		w.holders = append(w.holders, h)
		h = LockHolder{}
		return nil
	})
	return w
}
