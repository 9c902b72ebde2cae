package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/internal/daemon"
	"github.com/drainer-io/drainer/migrations"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit codes (docs/reference.md §3).
const (
	exitOK      = 0
	exitRuntime = 1
	exitUsage   = 2
)

// usageError marks a usage or config problem: exit 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// globals are the flags every database command shares.
type globals struct {
	databaseURL string
	schema      string
	// database names a database of the config's databases: section
	// (--database NAME with --config FILE); see database.go.
	database   string
	configPath string
	// resolved is set once database has been looked up.
	resolved bool
	// cmd is the command the flags belong to: errors name a flag by where
	// its value came from (flagRef).
	cmd *cobra.Command
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	var logs logFlags
	root := &cobra.Command{
		Use:   "drainer",
		Short: "Drain a transactional outbox to providers, effectively once",
		Long: `drainer claims due rows of a Postgres outbox (FOR UPDATE SKIP LOCKED, under a
lease), sends each to its provider with a stable idempotency key, and records
the outcome: success, retry with Full Jitter, or terminal failure and saga
compensation.

Every flag can also be set as DRAINER_<FLAG> (upper case, - becomes _);
precedence: flag, environment, config file, default.

Every command logs to stderr through one handler: JSON unless --log-format
text, durations written like 30s or 1m30s.

Exit codes: 0 success, 1 runtime error, 2 usage or config error.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnv(cmd); err != nil {
				return err
			}
			logs.cmd = cmd
			log, err := logs.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			cmd.SetContext(withLogger(cmd.Context(), log))
			return nil
		},
	}
	addLogFlags(root, &logs)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(
		// Each command has its own flag values (and defaults).
		newMigrateCmd(&globals{}),
		newRunCmd(&globals{}),
		newCheckCmd(),
		newEnqueueCmd(&globals{}),
		newVersionCmd(),
		newDemoCmd(),
		newBenchCmd(),
		newListCmd(),
		newStatsCmd(),
		newInspectCmd(),
		newRequeueCmd(),
		newCancelCmd(),
		newResolveCmd(),
		newAbortCmd(),
		newPauseCmd(),
		newResumeCmd(),
		newAuditCmd(),
		newRoutesCmd(),
		newConformanceCmd(),
	)
	wrapArgs(root)
	return root
}

// addDBFlags adds --database-url and --schema to a command, and --database
// with --config unless the command has its own --config (run).
func addDBFlags(cmd *cobra.Command, g *globals) {
	g.cmd = cmd
	cmd.Flags().StringVar(&g.databaseURL, "database-url", "", "Postgres URL (env DRAINER_DATABASE_URL)")
	cmd.Flags().StringVar(&g.schema, "schema", migrations.DefaultSchema, "schema holding the outbox")
	if cmd.Flags().Lookup("config") == nil {
		cmd.Flags().StringVar(&g.database, "database", "", "name of a database of the config's databases: section, instead of --database-url (needs --config)")
		cmd.Flags().StringVar(&g.configPath, "config", "", "config file (YAML) whose databases: section names --database")
	}
}

// requireDB checks --database-url (or resolves --database NAME through
// --config) and --schema; a problem with either is a usage error (exit 2).
func (g *globals) requireDB(ctx context.Context) error {
	if err := g.resolveDatabase(ctx); err != nil {
		return err
	}
	if g.databaseURL == "" {
		return usagef("no database URL: set --database-url or DRAINER_DATABASE_URL, or --database NAME with --config FILE")
	}
	if err := g.checkDatabaseURL(); err != nil {
		return err
	}
	return g.validateSchema()
}

// checkDatabaseURL reads the database URL as every command and the daemon
// read it (config.ParseDatabaseURL), naming where it came from: --database
// NAME, --database-url or DRAINER_DATABASE_URL.
func (g *globals) checkDatabaseURL() error {
	if _, err := config.ParseDatabaseURL(g.databaseURL); err != nil {
		from := flagRef(g.cmd, "database-url")
		if g.resolved {
			from = "--database " + g.database
		}
		return usagef("%s: %v", from, err)
	}
	return nil
}

// applyEnv sets every flag not given on the command line from DRAINER_<FLAG>.
// It runs after parsing, so secrets never show as defaults in --help.
func applyEnv(cmd *cobra.Command) error {
	var errs []error
	onCommandLine := make(map[string]bool)
	cmd.Flags().Visit(func(f *pflag.Flag) { onCommandLine[f.Name] = true })
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Changed || onCommandLine[exclusiveFlags[f.Name]] {
			return
		}
		env := "DRAINER_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", env, err))
			} else {
				f.Changed = true
				if f.Annotations == nil {
					f.Annotations = map[string][]string{}
				}
				f.Annotations[fromEnv] = []string{env}
			}
		}
	})
	if len(errs) > 0 {
		return usageError{errors.Join(errs...)}
	}
	return nil
}

// fromEnv is the annotation applyEnv puts on a flag it set: the name of the
// environment variable its value came from.
const fromEnv = "drainer-from-env"

// flagRef names where a flag's value came from, for an error about that
// value: DRAINER_<FLAG> when applyEnv set it from the environment, else
// --name (as when given on the command line or left at its default).
func flagRef(cmd *cobra.Command, name string) string {
	if cmd != nil {
		if f := cmd.Flags().Lookup(name); f != nil {
			if env := f.Annotations[fromEnv]; len(env) == 1 {
				return env[0]
			}
		}
	}
	return "--" + name
}

// givenHere reports whether the flag name was given on the command line,
// not set from its DRAINER_<FLAG>.
func givenHere(cmd *cobra.Command, name string) bool {
	f := cmd.Flags().Lookup(name)
	return f != nil && f.Changed && len(f.Annotations[fromEnv]) == 0
}

// exclusiveFlags pairs flags that say the same thing two ways: one given on
// the command line makes the environment variable of the other ignored.
var exclusiveFlags = map[string]string{"database-url": "database", "database": "database-url"}

// execute runs the CLI and maps errors to exit codes.
func execute(args []string, stdout, stderr io.Writer) int {
	return executeIn(args, os.Stdin, stdout, stderr)
}

// executeIn is execute reading standard input from stdin.
func executeIn(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	testStartDelay(stderr)
	root := newRoot(stdout, stderr)
	root.SetIn(stdin)
	releaseUnlessOwned(root, args)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "drainer:", withDatabase(cmd, err))
	var ue usageError
	var ce *daemon.ConfigError
	switch {
	case errors.As(err, &ue), errors.As(err, &ce), isCobraUsage(err):
		return exitUsage
	default:
		return exitRuntime
	}
}

// withDatabase names the database of --database NAME in an error that does
// not: with a fleet's databases, "no row with key X" must say where it
// looked.
func withDatabase(cmd *cobra.Command, err error) string {
	msg := err.Error()
	if cmd == nil {
		return msg
	}
	f := cmd.Flags().Lookup("database")
	if f == nil || f.Value.String() == "" || strings.Contains(msg, f.Value.String()) {
		return msg
	}
	return "database " + f.Value.String() + ": " + msg
}

// isCobraUsage recognises cobra's own error for an unknown subcommand
// (argument and flag errors are wrapped as usageError where they arise).
func isCobraUsage(err error) bool {
	return strings.HasPrefix(err.Error(), "unknown command ")
}

// wrapArgs makes every command's argument validation a usage error (exit 2).
func wrapArgs(c *cobra.Command) {
	if orig := c.Args; orig != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := orig(cmd, args); err != nil {
				return usageError{err}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		wrapArgs(sub)
	}
}
