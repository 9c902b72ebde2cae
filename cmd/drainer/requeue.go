package main

import (
	"context"
	"fmt"
	"github.com/drainer-io/drainer/outbox"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/drainer-io/drainer/ops"
	"github.com/spf13/cobra"
)

// bulkFlags are the flags of requeue and cancel by filter.
type bulkFlags struct {
	f         ops.Filter
	olderThan string
	opts      ops.BulkOptions
	reason    string
}

func addBulkFlags(cmd *cobra.Command, b *bulkFlags) {
	fl := cmd.Flags()
	fl.StringVar((*string)(&b.f.Status), "status", "", "act on the rows in this status")
	fl.StringVar(&b.f.Run, "run", "", "only rows of this agent_run_id")
	fl.StringVar(&b.f.Tool, "tool", "", "only rows of this tool_name")
	fl.StringVar(&b.olderThan, "older-than", "", "only rows not updated for this long (90m, 36h, 7d)")
	fl.BoolVar(&b.opts.DryRun, "dry-run", false, "print what would change and change nothing")
	fl.IntVar(&b.opts.Limit, "limit", 0, "act on at most N matching rows (default: all)")
	fl.IntVar(&b.opts.Show, "show", ops.DefaultShow, "list at most N changed and N refused rows (the counts cover all; 0: none, -1: all)")
	fl.IntVar(&b.opts.BatchSize, "batch-size", ops.DefaultBatchSize, "rows per transaction")
	fl.StringVar(&b.reason, "reason", "", "why, recorded in the audit trail")
}

// validate checks the bulk flags; withKey says a KEY argument was given,
// which excludes the filter flags.
func (b *bulkFlags) validate(cmd *cobra.Command, withKey bool) error {
	if withKey {
		for _, name := range []string{"status", "run", "tool", "older-than", "limit", "batch-size"} {
			if cmd.Flags().Changed(name) {
				return usagef("%s selects rows by filter: give either KEY or filter flags, not both", flagRef(cmd, name))
			}
		}
		return nil
	}
	if err := nonEmptyFilters(cmd); err != nil {
		return err
	}
	if b.opts.Limit < 0 {
		return usagef("%s: must not be negative, got %d", flagRef(cmd, "limit"), b.opts.Limit)
	}
	if b.opts.BatchSize < 1 {
		return usagef("%s: must be positive, got %d", flagRef(cmd, "batch-size"), b.opts.BatchSize)
	}
	switch {
	case b.opts.Show == 0:
		b.opts.Show = -1 // ops: none
	case b.opts.Show < 0:
		b.opts.Show = math.MaxInt // ops: all
	}
	var err error
	b.f.OlderThan, err = parseAgeOf(flagRef(cmd, "older-than"), b.olderThan)
	return err
}

func newRequeueCmd() *cobra.Command {
	var o opFlags
	var b bulkFlags
	cmd := &cobra.Command{
		// An interrupt stops a bulk action between its batches, and the
		// output says what was done (interrupted).
		Annotations: map[string]string{ownsSignals: "yes"},
		Use:         "requeue KEY | --status S [--run R] [--tool T] [--older-than D] [--dry-run] [--limit N]",
		Short:       "Make rows pending and due now (same key), e.g. failed rows after an outage",
		Long: `Make a row (KEY) or every row matching the filter (--status required)
pending and due now. The key never changes.

  failed     attempts reset to 0: a fresh retry budget (first_attempt_at is
             kept, so the key-TTL guard still protects a key the provider
             may have forgotten)
  pending    due now; attempts unchanged
  cancelled  pending again; attempts unchanged
  refused    succeeded, compensated (the effect happened or was undone),
             in_flight (a worker holds the lease), outcome_unknown and
             compensation_failed (use drainer resolve)

A failed forward row aborted its run. Requeueing it revives the run (the
abort is undone and the never-attempted rows it cancelled are pending again)
only if the abort came from a row failure (not drainer abort nor the agent),
the saga has not started compensating, and all the run's failed rows are
requeued together; otherwise the row is refused, since re-running a step of
an aborted run would fight its saga. Cancelled rows of an aborted run are
refused: requeue the failed row that aborted it.

A row keeps its not_before floor: the moment a provider's Retry-After (or
the backoff after its last answer) allows the next attempt. It is then due
at that moment, not now, and the output says so; --ignore-retry-after
clears the floor and the output names each floor it overrode.

By filter, rows are changed in batches (--batch-size per transaction); rows
that cannot be requeued are listed and left alone, and the exit code is 1
if there were any. --dry-run prints the count and the first --show rows
that would change, and changes nothing.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := shutdownContext(cmd.Context(), nil)
			defer stop()
			if err := b.validate(cmd, len(args) == 1); err != nil {
				return err
			}
			if len(args) == 0 {
				if b.f.Status == "" {
					return usagef("give a KEY, or --status failed|pending|cancelled to requeue by filter")
				}
				if err := ops.RequeueStatus(b.f.Status); err != nil {
					return usagef("%s: %w", flagRef(cmd, "status"), err)
				}
			}
			c, done, err := o.client(ctx)
			if err != nil {
				return err
			}
			defer done()
			who := o.who(b.reason)
			var res *ops.Result
			if len(args) == 1 {
				res, err = c.Requeue(ctx, args[0], who, b.opts)
			} else {
				res, err = c.RequeueWhere(ctx, b.f, who, b.opts)
				err = interrupted(ctx, res, err)
			}
			if err == nil && len(args) == 0 && res != nil && res.Count == 0 && res.RefusedCount == 0 {
				noteUnmatched(cmd, c, b.f)
			}
			return reportResult(cmd, &o, res, err, len(args) == 1)
		},
	}
	addBulkFlags(cmd, &b)
	cmd.Flags().BoolVar(&b.opts.IgnoreRetryAfter, "ignore-retry-after", false,
		"make the rows due now even where a provider's Retry-After (or the backoff) asked to wait; the output names each overridden floor")
	addActorFlag(cmd, &o)
	addOpFlags(cmd, &o)
	return cmd
}

// reportResult prints the result of requeue or cancel; err is the action's
// error. By filter, refused rows make the command fail after the output.
func reportResult(cmd *cobra.Command, o *opFlags, res *ops.Result, err error, single bool) error {
	if res == nil {
		return err
	}
	w := cmd.OutOrStdout()
	if o.json() {
		if jerr := writeJSON(w, res); jerr != nil {
			return jerr
		}
	} else if single {
		printSingle(w, res)
	} else {
		printBulk(w, res)
	}
	if err != nil {
		return err
	}
	if res.RefusedCount > 0 && !res.DryRun {
		return fmt.Errorf("%s: %d matching row(s) refused and left alone (listed above)", res.Action, res.RefusedCount)
	}
	return nil
}

// interrupted words the error of a bulk action that an interrupt
// (SIGINT, SIGTERM: ctx) stopped: the batches written before it stand,
// each its own transaction, the one under way was rolled back, and running
// the command again finishes the work.
func interrupted(ctx context.Context, res *ops.Result, err error) error {
	if err == nil || ctx.Err() == nil || res == nil {
		return err
	}
	verb := past(res.Action)
	if res.DryRun {
		return fmt.Errorf("interrupted: the dry run stopped before it had read every matching row; nothing was changed")
	}
	return fmt.Errorf("interrupted: %d row(s) %s in %d batch(es) before it (each batch its own transaction; the one under way was rolled back, the other matching rows left as they were): run the same command again to finish",
		res.Count, verb, res.Batches)
}

// noteUnmatched says on stderr which of the filter's names no row has at
// all, when an action by filter matched no row: a misspelt --tool or --run
// is told, not taken for an empty result.
func noteUnmatched(cmd *cobra.Command, c *ops.Client, f ops.Filter) {
	notes, err := c.Unmatched(cmd.Context(), f)
	if err != nil {
		return // the action's own answer stands
	}
	for _, n := range notes {
		fmt.Fprintln(cmd.ErrOrStderr(), "note: "+n)
	}
}

// past is the past tense of an action.
func past(action string) string {
	if action == "cancel" {
		return string(outbox.StatusCancelled)
	}
	return action + "d"
}

func printSingle(w io.Writer, res *ops.Result) {
	prefix := ""
	if res.DryRun {
		prefix = "dry run: would have "
	}
	for _, ch := range res.Rows {
		fmt.Fprintf(w, "%s%s %s: %s → %s (attempts ", prefix, past(res.Action), ch.Key, ch.FromStatus, ch.Status)
		if ch.FromAttempts != ch.Attempts {
			fmt.Fprintf(w, "%d → ", ch.FromAttempts)
		}
		fmt.Fprint(w, ch.Attempts)
		switch {
		case ch.Status == outbox.StatusPending && ch.NotBefore != nil:
			fmt.Fprintf(w, ", due at %s", ch.NotBefore.UTC().Format(time.RFC3339))
		case ch.Status == outbox.StatusPending:
			fmt.Fprint(w, ", due now")
		}
		fmt.Fprintln(w, ")")
		if ch.Warning != "" {
			fmt.Fprintf(w, "warning: %s: %s\n", ch.Key, ch.Warning)
		}
	}
	printRevived(w, res)
}

func printRevived(w io.Writer, res *ops.Result) {
	verb, are := "revived", "are"
	if res.DryRun {
		verb, are = "would revive", "would be"
	}
	for _, rv := range res.Revived {
		fmt.Fprintf(w, "%s run %s (aborted: %s): the %d row(s) its abort cancelled %s pending again", verb, rv.AgentRunID, rv.AbortReason, len(rv.Restored), are)
		for i, k := range rv.Restored {
			if i == 0 {
				fmt.Fprint(w, ":")
			}
			fmt.Fprint(w, " ", k)
		}
		fmt.Fprintln(w)
	}
}

func printBulk(w io.Writer, res *ops.Result) {
	if res.DryRun {
		fmt.Fprintf(w, "dry run: would %s %d row(s); nothing was changed\n", res.Action, res.Count)
	} else {
		fmt.Fprintf(w, "%s %d row(s) in %d batch(es)\n", past(res.Action), res.Count, res.Batches)
	}
	if res.Warnings > 0 {
		if res.Action == "cancel" {
			fmt.Fprintf(w, "warning: %d of them had been attempted: their effect may exist\n", res.Warnings)
		} else {
			fmt.Fprintf(w, "note: %d of them have a Retry-After (or backoff) floor: see WARNING\n", res.Warnings)
		}
	}
	if len(res.Rows) > 0 {
		t := newTable(w, "SEQ", "KEY", "RUN", "STEP", "TOOL", "FROM", "STATUS", "ATTEMPTS", "WARNING")
		for _, ch := range res.Rows {
			t.row(i64(ch.Seq), ch.Key, trunc(ch.AgentRunID, 24), trunc(ch.StepID, 20), trunc(ch.ToolName, 24),
				string(ch.FromStatus), string(ch.Status), strconv.Itoa(ch.FromAttempts)+" → "+strconv.Itoa(ch.Attempts), trunc(ch.Warning, 40))
		}
		_ = t.flush()
		if more := res.Count - len(res.Rows); more > 0 {
			fmt.Fprintf(w, "… and %d more\n", more)
		}
	}
	if len(res.Revived) > 0 {
		restored := 0
		for _, rv := range res.Revived {
			restored += len(rv.Restored)
		}
		verb, are := "revived", "are"
		if res.DryRun {
			verb, are = "would revive", "would be"
		}
		fmt.Fprintf(w, "%s %d aborted run(s): the %d row(s) their aborts cancelled %s pending again\n", verb, len(res.Revived), restored, are)
	}
	if res.RefusedCount > 0 {
		fmt.Fprintf(w, "refused %d row(s):\n", res.RefusedCount)
		t := newTable(w, "KEY", "STATUS", "WHY")
		for _, e := range res.Refused {
			t.row(e.Key, string(e.Status), trunc(e.Why, 120))
		}
		_ = t.flush()
		if more := res.RefusedCount - len(res.Refused); more > 0 {
			fmt.Fprintf(w, "… and %d more\n", more)
		}
	}
}
