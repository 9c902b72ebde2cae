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

	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/ops"
	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5"
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
}

// addOpFlags adds --database-url, --schema and --output to cmd.
func addOpFlags(cmd *cobra.Command, o *opFlags) {
	addDBFlags(cmd, &o.g)
	cmd.Flags().StringVar(&o.output, "output", outputTable, "output format: table or json (one JSON object or array; field names are the outbox column names)")
}

// addActorFlag adds --actor to an action.
func addActorFlag(cmd *cobra.Command, o *opFlags) {
	cmd.Flags().StringVar(&o.actor, "actor", "", `who performs the action, recorded in the audit trail (default $USER, else the process's account as user@host)`)
}

// validate checks the shared flags (looking up --database NAME).
func (o *opFlags) validate(ctx context.Context) error {
	if o.output != outputTable && o.output != outputJSON {
		return usagef("--output: %q is not table or json", o.output)
	}
	return o.g.requireDB(ctx)
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

// defaultActor names whoever runs the command when --actor does not: $USER,
// else the account of the process (a container, `kubectl exec`, cron set
// no $USER), as user@host so that the audit trail says where.
func defaultActor() string {
	if u := strings.TrimSpace(os.Getenv("USER")); u != "" {
		return u
	}
	name := "uid " + strconv.Itoa(os.Getuid())
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if host, err := os.Hostname(); err == nil && host != "" {
		name += "@" + host
	}
	return name
}

// client validates the flags, connects and returns an ops client; close
// ends the connection.
func (o *opFlags) client(ctx context.Context) (c *ops.Client, close func(), err error) {
	if err := o.validate(ctx); err != nil {
		return nil, nil, err
	}
	conn, err := pgx.Connect(ctx, o.g.databaseURL)
	if err != nil {
		return nil, nil, fmt.Errorf("connect: %w", err)
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
func parseAge(s string) (time.Duration, error) {
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
		return 0, usagef("--older-than: %q is not a duration like 90m, 36h or 7d", s)
	}
	return d, nil
}
