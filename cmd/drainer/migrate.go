package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/drainer-io/drainer/store"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/internal/catalog"
	"github.com/drainer-io/drainer/migrations"
	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
)

// migrateConnectTimeout bounds connecting to one database of migrate --all,
// so that an unreachable one fails instead of holding a slot.
const migrateConnectTimeout = 30 * time.Second

func newMigrateCmd(g *globals) *cobra.Command {
	var all bool
	var parallel int
	var lockTimeout, lockWait time.Duration
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply the schema migrations (idempotent; safe from many replicas at once)",
		Long: `Apply the schema migrations to one database (--database-url, or --database
NAME with --config FILE), or with --all to every database of the config's
databases: section (static entries and catalog rows), --parallel at a time.
--all prints one line per database (its name, and the schema version before
and after, or the error) and exits 1 if any failed.

Each migration step is one transaction whose statements wait at most
--lock-timeout for a table lock, so that a running drain never queues long
behind it; a step that could not take its locks (a transaction left open
on the queue) is rolled back and tried again, with growing pauses, for up
to --lock-wait. Then migrate fails naming the sessions holding the locks,
the steps committed before it staying applied.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if lockTimeout < time.Millisecond {
				return usagef("%s: must be at least 1ms, got %s", flagRef(cmd, "lock-timeout"), lockTimeout)
			}
			if lockWait < 0 {
				return usagef("%s: must not be negative, got %s", flagRef(cmd, "lock-wait"), lockWait)
			}
			opts := migrations.Options{LockTimeout: lockTimeout, LockWait: lockWait, Log: cmdLogger(cmd)}
			if all {
				return migrateAll(cmd, g, parallel, opts)
			}
			if g.configPath != "" && g.database == "" && g.databaseURL == "" {
				return usagef("--config: give --all to migrate every database of its databases: section, or --database NAME for one")
			}
			if err := g.requireDB(cmd.Context()); err != nil {
				return err
			}
			conn, err := catalog.ConnectSession(cmd.Context(), config.Secret(g.databaseURL), "")
			if err != nil {
				return err
			}
			defer conn.Close(cmd.Context())
			r, err := migrations.MigrateReport(cmd.Context(), conn, g.schema, opts)
			if err != nil {
				return err
			}
			if r.Newer() {
				fmt.Fprintf(cmd.OutOrStdout(), "schema %s at version %d%s\n", g.schema, r.Version, newerNote(cmd.Context(), conn, g.schema))
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schema %s at version %d (%d applied)\n", g.schema, r.Version, r.Applied)
			return nil
		},
	}
	addDBFlags(cmd, g)
	cmd.Flags().BoolVar(&all, "all", false, "migrate every database of the config's databases: section (needs --config)")
	cmd.Flags().IntVar(&parallel, "parallel", 4, "with --all: databases migrated at once")
	cmd.Flags().DurationVar(&lockTimeout, "lock-timeout", migrations.DefaultLockTimeout, "how long each statement of a migration step waits for a table lock before the step is rolled back and retried")
	cmd.Flags().DurationVar(&lockWait, "lock-wait", migrations.DefaultLockWait, "how long a step whose table locks other sessions hold is retried before migrate gives up (0: try once)")
	return cmd
}

// migrateAll runs `migrate --all`.
func migrateAll(cmd *cobra.Command, g *globals, parallel int, opts migrations.Options) error {
	switch {
	case g.configPath == "":
		return usagef("--all needs --config FILE (the config whose databases: section lists the databases)")
	case givenHere(cmd, "database") || givenHere(cmd, "database-url"):
		return usagef("--all migrates every database of --config: leave out --database and --database-url")
	case parallel < 1 || parallel > 64:
		return usagef("%s: must be between 1 and 64, got %d", flagRef(cmd, "parallel"), parallel)
	}
	// DRAINER_DATABASE_URL (or DRAINER_DATABASE), set for the other
	// commands, says nothing of the databases of --all.
	g.database, g.databaseURL = "", ""
	if err := g.validateSchema(); err != nil {
		return err
	}
	dbs, err := loadDatabases(g.configPath)
	if err != nil {
		return err
	}
	ctx, log := cmd.Context(), opts.Log
	out := &lineWriter{w: cmd.OutOrStdout()}

	targets, catalogErr := migrateTargets(ctx, dbs, log)
	failed := 0
	if catalogErr != nil {
		failed++
		out.printf("catalog: error: %v\n", catalogErr)
	}

	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failedNames []string
	for _, t := range targets {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			err := t.err
			var from, to, applied int
			var newer string
			if err == nil {
				o := opts
				o.Log = log.With("database", t.name)
				from, to, applied, newer, err = migrateOne(ctx, t.url, g.schema, o)
			}
			if err != nil {
				mu.Lock()
				failedNames = append(failedNames, t.name)
				mu.Unlock()
				out.printf("%s: error: %s\n", t.name, oneLine(err))
				return
			}
			if newer != "" {
				out.printf("%s: version %d%s\n", t.name, to, newer)
				return
			}
			if applied == 0 && from == to {
				out.printf("%s: version %d (up to date)\n", t.name, to)
				return
			}
			out.printf("%s: version %d → %d (%d applied)\n", t.name, from, to, applied)
		})
	}
	wg.Wait()
	failed += len(failedNames)
	if failed > 0 {
		what := fmt.Sprintf("%d of %d databases failed", len(failedNames), len(targets))
		if len(failedNames) > 0 {
			what += " (" + strings.Join(slices.Sorted(slices.Values(failedNames)), ", ") + ")"
		}
		if len(failedNames) < failed {
			what += "; the catalog could not be read"
		}
		return fmt.Errorf("migrate --all: %s", what)
	}
	out.printf("%d databases migrated (schema %s, version %d)\n", len(targets), g.schema, migrations.Latest())
	return nil
}

// newerNote describes a schema a newer release migrated (Result.Newer):
// nothing applied, and, when this release's daemon refuses the schema (its schema_meta asks for a newer one), why. The
// command still succeeds: there is nothing for this release to migrate,
// and `drainer run` works on such a schema (expand/contract) or waits,
// saying why, as it does for any schema it cannot use.
func newerNote(ctx context.Context, conn *pgx.Conn, schema string) string {
	note := fmt.Sprintf(", newer than this release's %d; nothing applied", migrations.Latest())
	if _, err := migrations.Check(ctx, conn, schema); errors.Is(err, migrations.ErrSchemaNotReady) {
		note += "; this release's drainer run refuses it: " + oneLine(err)
	}
	return note
}

// migrateTarget is a database `migrate --all` migrates; err is why its url
// could not be resolved.
type migrateTarget struct {
	name string
	url  config.Secret
	err  error
}

// migrateTargets lists what `migrate --all` migrates: the static entries,
// each url resolved now; then the catalog's rows, a static name winning.
// The catalog's error, if it could not be read, comes with the static
// entries.
func migrateTargets(ctx context.Context, dbs *config.Databases, log *slog.Logger) ([]migrateTarget, error) {
	var targets []migrateTarget
	static := make(map[string]bool)
	for _, e := range dbs.Static {
		url, err := e.ResolveURL()
		targets = append(targets, migrateTarget{name: e.Name, url: url, err: err})
		static[e.Name] = true
	}
	if dbs.Query == nil {
		return targets, nil
	}
	c := catalog.New(&config.Databases{Query: dbs.Query}, log)
	list, err := c.List(ctx)
	c.Close()
	for _, d := range list {
		if static[d.Name] {
			log.Warn("databases: catalog row names a static database; the static entry wins", "database", d.Name)
			continue
		}
		targets = append(targets, migrateTarget{name: d.Name, url: d.URL})
	}
	return targets, err
}

// migrateOne migrates one database and reports its schema version before
// and after, and newerNote's when a newer release migrated it. Its errors
// hold no url.
func migrateOne(ctx context.Context, url config.Secret, schema string, opts migrations.Options) (from, to, applied int, newer string, err error) {
	cctx, cancel := context.WithTimeout(ctx, migrateConnectTimeout)
	conn, err := catalog.ConnectSession(cctx, url, "drainer-migrate")
	cancel()
	if err != nil {
		return 0, 0, 0, "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if from, err = schemaVersion(ctx, conn, schema); err != nil {
		return 0, 0, 0, "", err
	}
	r, err := migrations.MigrateReport(ctx, conn, schema, opts)
	if err == nil && r.Newer() {
		newer = newerNote(ctx, conn, schema)
	}
	return from, r.Version, r.Applied, newer, err
}

// schemaVersion reads a schema's migration version, 0 when never migrated.
func schemaVersion(ctx context.Context, conn *pgx.Conn, schema string) (int, error) {
	st, err := store.New(schema)
	if err != nil {
		return 0, err
	}
	return st.SchemaVersion(ctx, conn)
}

// lineWriter serialises lines written by concurrent goroutines.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format, args...)
}

// oneLine folds a multi-line error into one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
