package main

import (
	"fmt"
	"io"

	"github.com/drainer-io/drainer/ops"
	"github.com/spf13/cobra"
)

// pauseTarget reads ROUTE or --adapter A.
func pauseTarget(args []string, adapter string) (target, name string, err error) {
	switch {
	case len(args) == 1 && adapter != "":
		return "", "", usagef("give a ROUTE or --adapter A, not both")
	case len(args) == 1:
		return ops.TargetRoute, args[0], nil
	case adapter != "":
		return ops.TargetAdapter, adapter, nil
	}
	return "", "", nil
}

func newPauseCmd() *cobra.Command {
	var o opFlags
	var adapter, reason string
	cmd := &cobra.Command{
		Use:   "pause [ROUTE | --adapter A] [--reason TEXT]",
		Short: "Pause a route (by tool_name) or an adapter on every replica; no argument lists the pauses",
		Long: `Pause a route (ROUTE, a tool_name) or an adapter (--adapter A) on every
replica: they read the pauses within seconds, and rows of a paused target
wait without consuming attempts. Pausing what is paused already is an error
(exit 1). Without ROUTE or --adapter, list the current pauses.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			target, name, err := pauseTarget(args, adapter)
			if err != nil {
				return err
			}
			c, done, err := o.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			w := cmd.OutOrStdout()
			if target == "" {
				ps, err := c.Pauses(cmd.Context())
				if err != nil {
					return err
				}
				if o.json() {
					return writeJSON(w, ps)
				}
				printPauses(w, ps)
				return nil
			}
			p, err := c.Pause(cmd.Context(), target, name, o.who(reason))
			if err != nil {
				return err
			}
			if o.json() {
				return writeJSON(w, p)
			}
			fmt.Fprintf(w, "paused %s %s\n", p.Target, p.Name)
			return nil
		},
	}
	cmd.Flags().StringVar(&adapter, "adapter", "", "pause this adapter instead of a route")
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the audit trail")
	addActorFlag(cmd, &o)
	addOpFlags(cmd, &o)
	return cmd
}

func newResumeCmd() *cobra.Command {
	var o opFlags
	var adapter, reason string
	cmd := &cobra.Command{
		Use:   "resume ROUTE | --adapter A [--reason TEXT]",
		Short: "Lift the pause of a route or an adapter",
		Long: `Lift the pause of a route (ROUTE) or an adapter (--adapter A); its rows are
dispatched again within seconds. Resuming what is not paused is an error
(exit 1).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			target, name, err := pauseTarget(args, adapter)
			if err != nil {
				return err
			}
			if target == "" {
				return usagef("give the ROUTE or --adapter A to resume (drainer pause lists the pauses)")
			}
			c, done, err := o.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			p, err := c.Resume(cmd.Context(), target, name, o.who(reason))
			if err != nil {
				return err
			}
			if o.json() {
				return writeJSON(cmd.OutOrStdout(), p)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "resumed %s %s (paused since %s by %s)\n", p.Target, p.Name, fmtTime(p.PausedAt), p.PausedBy)
			return nil
		},
	}
	cmd.Flags().StringVar(&adapter, "adapter", "", "resume this adapter instead of a route")
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the audit trail")
	addActorFlag(cmd, &o)
	addOpFlags(cmd, &o)
	return cmd
}

func printPauses(w io.Writer, ps []ops.Pause) {
	if len(ps) == 0 {
		fmt.Fprintln(w, "nothing is paused")
		return
	}
	t := newTable(w, "TARGET", "NAME", "PAUSED_AT", "PAUSED_BY", "REASON")
	for _, p := range ps {
		t.row(p.Target, p.Name, fmtTime(p.PausedAt), trunc(p.PausedBy, 24), trunc(p.Reason, 60))
	}
	_ = t.flush()
}
