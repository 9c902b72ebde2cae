package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/drainer-io/drainer/ops"
	"github.com/drainer-io/drainer/store"
	"github.com/spf13/cobra"
)

// maxListLimit bounds --limit of list.
const maxListLimit = 10000

func newListCmd() *cobra.Command {
	var o opFlags
	var f ops.Filter
	var olderThan string
	var limit int
	cmd := &cobra.Command{
		Use:   "list [--status S] [--run R] [--tool T] [--older-than D] [--limit N] [--after-seq N]",
		Short: "List outbox rows in seq order, a page at a time",
		Long: `List outbox rows in seq (enqueue) order, at most --limit per page. When more
rows match, a hint names the --after-seq of the next page (on stdout after
the table; on stderr with --output json, whose stdout is one JSON array).

--older-than D matches rows whose updated_at (their last change: enqueue,
claim, attempt or operator action) is more than D ago by the database clock;
D is a Go duration (90m, 36h) or whole days (7d).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := nonEmptyFilters(cmd); err != nil {
				return err
			}
			if f.Status != "" {
				if err := ops.ValidateStatus(f.Status); err != nil {
					return usagef("%s: %w", flagRef(cmd, "status"), err)
				}
			}
			if limit < 1 || limit > maxListLimit {
				return usagef("%s: must be between 1 and %d, got %d", flagRef(cmd, "limit"), maxListLimit, limit)
			}
			if f.AfterSeq < 0 {
				return usagef("%s: must not be negative, got %d", flagRef(cmd, "after-seq"), f.AfterSeq)
			}
			var err error
			if f.OlderThan, err = parseAgeOf(flagRef(cmd, "older-than"), olderThan); err != nil {
				return err
			}
			c, done, err := o.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			out := cmd.OutOrStdout()
			if o.json() {
				next, err := writeJSONRows(out, func(fn func(*ops.Row) error) (int64, error) {
					return c.EachListed(cmd.Context(), f, limit, fn)
				})
				if err != nil {
					return err
				}
				if h := nextPageHint(next); h != "" {
					fmt.Fprintln(cmd.ErrOrStderr(), h)
				}
				return nil
			}
			// The table shows no payload or response: none is read.
			page, err := c.ListSummaries(cmd.Context(), f, limit)
			if err != nil {
				return err
			}
			if len(page.Rows) == 0 {
				fmt.Fprintln(out, "no rows match")
				return nil
			}
			printRows(out, page.Rows)
			if h := nextPageHint(page.NextAfterSeq); h != "" {
				fmt.Fprintln(out, h)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar((*string)(&f.Status), "status", "", "only rows in this status")
	fl.StringVar(&f.Run, "run", "", "only rows of this agent_run_id")
	fl.StringVar(&f.Tool, "tool", "", "only rows of this tool_name")
	fl.StringVar(&olderThan, "older-than", "", "only rows not updated for this long (90m, 36h, 7d)")
	fl.IntVar(&limit, "limit", ops.DefaultListLimit, "rows per page")
	fl.Int64Var(&f.AfterSeq, "after-seq", 0, "start after this seq (the hint of the previous page)")
	addOpFlags(cmd, &o)
	return cmd
}

// nextPageHint names the --after-seq of the next page, "" when there is
// none.
func nextPageHint(next int64) string {
	if next == 0 {
		return ""
	}
	return "more rows: add --after-seq " + strconv.FormatInt(next, 10)
}

// writeJSONRows writes the rows list hands over as one JSON array, laid
// out as writeJSON lays out a slice, one row at a time: it holds one row's
// encoding, never the page's (a page of rows as large as
// drainer.max_payload_bytes would otherwise be held whole, and again as
// its encoding). An error after the first row leaves the array unclosed:
// the command fails, and its output does not parse.
func writeJSONRows(w io.Writer, list func(fn func(*ops.Row) error) (int64, error)) (int64, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("  ", "  ")
	enc.SetEscapeHTML(false)
	sep := "[\n  "
	next, err := list(func(r *ops.Row) error {
		buf.Reset()
		buf.WriteString(sep)
		sep = ",\n  "
		if err := enc.Encode(r); err != nil {
			return err
		}
		buf.Truncate(buf.Len() - 1) // Encode's newline
		_, err := w.Write(buf.Bytes())
		return err
	})
	if err != nil {
		return 0, err
	}
	end := "\n]\n"
	if sep == "[\n  " {
		end = "[]\n"
	}
	_, err = io.WriteString(w, end)
	return next, err
}

// printRows prints rows as a table, long fields truncated.
func printRows(w interface{ Write([]byte) (int, error) }, rows []store.RowSummary) {
	t := newTable(w, "SEQ", "KEY", "RUN", "STEP", "TOOL", "KIND", "STATUS", "ATTEMPTS", "NEXT_ATTEMPT_AT", "UPDATED_AT", "LAST_ERROR")
	for _, r := range rows {
		t.row(strconv.FormatInt(r.Seq, 10), r.Key, trunc(r.AgentRunID, 24), trunc(r.StepID, 20), trunc(r.ToolName, 24),
			string(r.Kind), string(r.Status), strconv.Itoa(r.Attempts), fmtTime(r.NextAttemptAt), fmtTime(r.UpdatedAt),
			trunc(ops.Str(r.LastError), 60))
	}
	_ = t.flush()
}
