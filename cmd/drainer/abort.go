package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

func newAbortCmd() *cobra.Command {
	var o opFlags
	var reason string
	cmd := &cobra.Command{
		Use:   "abort RUN --reason TEXT",
		Short: "Abort a run: cancel its never-attempted rows and compensate its succeeded ones",
		Long: `Abort the run RUN (an agent_run_id), as drainer.abort_run does: its pending
forward rows never attempted become cancelled, rows already attempted finish
first, later enqueues into the run are created cancelled, and the daemon then
compensates the run's succeeded rows in reverse order (the saga). Prints how
many rows were cancelled. A run with no row is an error (exit 1).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(reason) == "" {
				return usagef("--reason is required")
			}
			c, done, err := o.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			res, err := c.Abort(cmd.Context(), args[0], o.who(reason))
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if o.json() {
				return writeJSON(w, res)
			}
			if res.AlreadyAborted {
				fmt.Fprintf(w, "run %s was already aborted at %s by %s (%s); %d more row(s) cancelled\n",
					res.AgentRunID, fmtTime(res.AbortedAt), res.AbortedBy, res.AbortReason, res.Cancelled)
				return nil
			}
			fmt.Fprintf(w, "aborted run %s: %d never-attempted row(s) cancelled; the daemon compensates its succeeded rows once none is in flight or parked (drainer inspect of any of its rows shows its saga)\n",
				res.AgentRunID, res.Cancelled)
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (required; recorded in the run and the audit trail)")
	addActorFlag(cmd, &o)
	addOpFlags(cmd, &o)
	return cmd
}
