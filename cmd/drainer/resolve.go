package main

import (
	"errors"
	"fmt"
	"github.com/drainer-io/drainer/outbox"
	"io"
	"strings"

	"github.com/drainer-io/drainer/ops"
	"github.com/spf13/cobra"
)

func newResolveCmd() *cobra.Command {
	var o opFlags
	var r ops.Resolution
	cmd := &cobra.Command{
		Use:   "resolve KEY --note TEXT [--outcome succeeded|failed]",
		Short: "Settle an outcome_unknown or compensation_failed row after a human checked it",
		Long: `Record what a human found out about a parked row. --note (what was
checked or done) is kept in the row's note and is the audit reason. The
provider error that parked the row is not kept: last_error becomes empty
(succeeded) or says who resolved it and why (failed, cancelled).

  outcome_unknown      --outcome succeeded: the effect happened (a
                       compensation row's forward row becomes compensated);
                       --outcome failed: it did not; a forward row then
                       aborts its run (never-attempted rows are cancelled,
                       the saga compensates the run), a compensation row
                       becomes compensation_failed.
  compensation_failed  a human undid the effect by hand (--outcome is
                       refused): the row becomes cancelled, its forward row
                       compensated, and the saga continues.

Other statuses are refused (exit 1).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(r.Note) == "" {
				return usagef("--note is required: say what was checked or done")
			}
			if r.Outcome != "" && r.Outcome != outbox.StatusSucceeded && r.Outcome != outbox.StatusFailed {
				return usagef("%s: %q is not succeeded or failed", flagRef(cmd, "outcome"), r.Outcome)
			}
			c, done, err := o.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			res, err := c.Resolve(cmd.Context(), args[0], r, o.who(r.Note))
			if errors.Is(err, ops.ErrOutcomeRequired) || errors.Is(err, ops.ErrOutcomeNotAllowed) {
				return usageError{fmt.Errorf("resolve %s: %w", args[0], err)}
			}
			if err != nil {
				return err
			}
			if o.json() {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			printResolved(cmd.OutOrStdout(), res)
			return nil
		},
	}
	cmd.Flags().StringVar(&r.Note, "note", "", "what was checked or done (required)")
	cmd.Flags().StringVar((*string)(&r.Outcome), "outcome", "", "succeeded or failed (outcome_unknown rows only)")
	addActorFlag(cmd, &o)
	addOpFlags(cmd, &o)
	return cmd
}

func printResolved(w io.Writer, res *ops.Resolved) {
	fmt.Fprintf(w, "resolved %s: %s → %s\n", res.Key, res.FromStatus, res.Status)
	if res.ForwardKey != "" {
		fmt.Fprintf(w, "forward row %s is %s\n", res.ForwardKey, res.ForwardStatus)
	}
	if res.Cancelled > 0 {
		fmt.Fprintf(w, "run %s aborted: %d never-attempted row(s) cancelled\n", res.AgentRunID, res.Cancelled)
	}
	if res.RunAborted {
		fmt.Fprintf(w, "the saga of run %s continues (saga_state %s)\n", res.AgentRunID, res.SagaState)
	}
}
