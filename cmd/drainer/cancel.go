package main

import (
	"strings"

	"github.com/drainer-io/drainer/ops"
	"github.com/spf13/cobra"
)

func newCancelCmd() *cobra.Command {
	var o opFlags
	var b bulkFlags
	cmd := &cobra.Command{
		// An interrupt stops a bulk action between its batches, and the
		// output says what was done (interrupted).
		Annotations: map[string]string{ownsSignals: "yes"},
		Use:         "cancel KEY | --run R [--status pending] [--tool T] [--dry-run] --reason TEXT",
		Short:       "Cancel pending rows so they are never sent",
		Long: `Turn a pending forward row (KEY) or the pending rows of a run (--run R)
into cancelled. --reason is required: last_error records the actor and the
reason, and so does the row's audit entry.

A row already attempted (attempts > 0) is cancelled with a warning: a
request was sent and its effect may exist; cancelling stops retries, it
undoes nothing. Refused: in_flight rows (a worker holds the lease),
outcome_unknown and compensation_failed rows (use drainer resolve), rows in
a final status, and pending compensation rows (cancelling one would mark its
forward row compensated without undoing it).

By run, --status may only be pending (the default); refused rows are listed
and make the exit code 1. --dry-run prints what would change and changes
nothing.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := shutdownContext(cmd.Context(), nil)
			defer stop()
			if err := b.validate(cmd, len(args) == 1); err != nil {
				return err
			}
			if len(args) == 0 {
				if b.f.Run == "" {
					return usagef("give a KEY, or --run R to cancel the pending rows of a run")
				}
				if b.f.Status != "" {
					if err := ops.CancelStatus(b.f.Status); err != nil {
						return usagef("%s: %w", flagRef(cmd, "status"), err)
					}
				}
			}
			if err := o.validate(ctx); err != nil {
				return err
			}
			if strings.TrimSpace(b.reason) == "" {
				return usagef("--reason is required: say why the rows are cancelled (it is recorded in last_error and the audit trail)")
			}
			c, done, err := o.client(ctx)
			if err != nil {
				return err
			}
			defer done()
			who := o.who(b.reason)
			var res *ops.Result
			if len(args) == 1 {
				res, err = c.Cancel(ctx, args[0], who, b.opts.DryRun)
			} else {
				res, err = c.CancelWhere(ctx, b.f, who, b.opts)
				err = interrupted(ctx, res, err)
			}
			if err == nil && len(args) == 0 && res != nil && res.Count == 0 && res.RefusedCount == 0 {
				noteUnmatched(cmd, c, b.f)
			}
			return reportResult(cmd, &o, res, err, len(args) == 1)
		},
	}
	addBulkFlags(cmd, &b)
	cmd.Flags().Lookup("reason").Usage = "why (required; recorded in last_error and the audit trail)"
	addActorFlag(cmd, &o)
	addOpFlags(cmd, &o)
	return cmd
}
