package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/internal/catalog"
	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/ops"
	"github.com/drainer-io/drainer/store"
	"github.com/spf13/cobra"
)

// Output formats of the operator commands.
const (
	outputTable = "table"
	outputJSON  = "json"
)

// opFlags are the flags every operator command shares: the database,
// --output, and for actions --actor.
type opFlags struct {
	g      globals
	output string
	actor  string
	// cmd is the command the flags belong to: errors name a flag by where
	// its value came from (see flagRef).
	cmd *cobra.Command
}

// addOpFlags adds --database-url, --schema and --output to cmd.
func addOpFlags(cmd *cobra.Command, o *opFlags) {
	o.cmd = cmd
	addDBFlags(cmd, &o.g)
	cmd.Flags().StringVar(&o.output, "output", outputTable, "output format: table or json (one JSON object or array; field names are the outbox column names)")
}

// addActorFlag adds --actor to an action.
func addActorFlag(cmd *cobra.Command, o *opFlags) {
	cmd.Flags().StringVar(&o.actor, "actor", "", `who performs the action, recorded in the audit trail (default $USER, else the name of the process's OS user, else the host name)`)
}

// filterFlags are the flags that narrow the rows a command lists or acts
// on.
var filterFlags = []string{"status", "run", "tool", "older-than"}

// nonEmptyFilters refuses a filter flag given an empty value (--run ""): it
// would be read as no filter, and match every row.
func nonEmptyFilters(cmd *cobra.Command) error {
	for _, name := range filterFlags {
		if f := cmd.Flags().Lookup(name); f != nil && f.Changed && strings.TrimSpace(f.Value.String()) == "" {
			return usagef("%s: must not be empty (leave it out to match every row)", flagRef(cmd, name))
		}
	}
	return nil
}

// validate checks the shared flags (looking up --database NAME).
func (o *opFlags) validate(ctx context.Context) error {
	if err := o.checkOutput(); err != nil {
		return err
	}
	return o.g.requireDB(ctx)
}

// checkOutput checks --output (or DRAINER_OUTPUT).
func (o *opFlags) checkOutput() error {
	if o.output != outputTable && o.output != outputJSON {
		return usagef("%s: %q is not table or json", flagRef(o.cmd, "output"), o.output)
	}
	return nil
}

func (o *opFlags) json() bool { return o.output == outputJSON }

// who names the operator of an action.
func (o *opFlags) who(reason string) ops.Who {
	actor := strings.TrimSpace(o.actor)
	if actor == "" {
		actor = defaultActor()
	}
	return ops.Who{Actor: actor, Reason: reason}
}

// defaultActor names whoever runs the command when --actor does not
// (docs/reference.md §3): $USER, else the name of the process's OS user (a
// container, `kubectl exec`, cron set no $USER), else the host name.
func defaultActor() string {
	return actorFrom(os.Getenv("USER"), osUserName, os.Hostname)
}

// osUserName is the name of the process's OS user.
func osUserName() (string, error) {
	u, err := user.Current()
	if err != nil {
		return "", err
	}
	return u.Username, nil
}

// actorFrom is defaultActor given $USER and the lookups of the OS user's
// name and of the host name; the last resort is the uid.
func actorFrom(userEnv string, osUser, host func() (string, error)) string {
	if u := strings.TrimSpace(userEnv); u != "" {
		return u
	}
	for _, lookup := range []func() (string, error){osUser, host} {
		if name, err := lookup(); err == nil && strings.TrimSpace(name) != "" {
			return strings.TrimSpace(name)
		}
	}
	return "uid " + strconv.Itoa(os.Getuid())
}

// client validates the flags, connects and returns an ops client; close
// ends the connection.
func (o *opFlags) client(ctx context.Context) (c *ops.Client, close func(), err error) {
	if err := o.validate(ctx); err != nil {
		return nil, nil, err
	}
	conn, err := catalog.Connect(ctx, config.Secret(o.g.databaseURL), "")
	if err != nil {
		return nil, nil, err
	}
	if _, err := migrations.Check(ctx, conn, o.g.schema); err != nil {
		conn.Close(ctx)
		return nil, nil, err
	}
	st, err := store.New(o.g.schema)
	if err != nil {
		conn.Close(ctx)
		return nil, nil, usageError{err}
	}
	return ops.New(conn, st), func() { conn.Close(context.WithoutCancel(ctx)) }, nil
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// table writes aligned columns; cells must be single-line (see cell).
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		if i > 0 {
			fmt.Fprint(t.tw, "\t")
		}
		fmt.Fprint(t.tw, cell(c))
	}
	fmt.Fprintln(t.tw)
}

func (t *table) flush() error { return t.tw.Flush() }

// cell makes s safe for a table cell: control characters (newlines, tabs)
// become spaces; empty becomes "-".
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

// trunc shortens s to at most n characters, ending with … when cut.
func trunc(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// fmtTime formats a time as RFC 3339 in UTC.
func fmtTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// fmtTimeP formats an optional time; nil is "".
func fmtTimeP(t *time.Time) string {
	if t == nil {
		return ""
	}
	return fmtTime(*t)
}

// fmtIntP formats an optional integer; nil is "".
func fmtIntP(p *int) string {
	if p == nil {
		return ""
	}
	return strconv.Itoa(*p)
}

// parseAge parses --older-than: a Go duration (90m, 36h) or whole days (7d).
func parseAge(s string) (time.Duration, error) { return parseAgeOf("--older-than", s) }

// parseAgeOf is parseAge naming the flag as flag in an error (see flagRef).
func parseAgeOf(flag, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err == nil && n >= 0 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, usagef("%s: %q is not a duration like 90m, 36h or 7d", flag, s)
	}
	return d, nil
}
