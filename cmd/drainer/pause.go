package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/internal/suggest"
	"github.com/drainer-io/drainer/ops"
	"github.com/spf13/cobra"
)

// pauseTarget reads ROUTE or --adapter A.
func pauseTarget(args []string, adapter string) (target, name string, err error) {
	switch {
	case len(args) == 1 && adapter != "":
		return "", "", usagef("give a ROUTE or --adapter A, not both")
	case len(args) == 1 && strings.TrimSpace(args[0]) == "":
		return "", "", usagef("ROUTE is empty: give a route's tool_name, or --adapter A")
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
			if err := checkPauseName(cmd, o.g.configPath, target, name); err != nil {
				return err
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

// checkPauseName refuses to pause a route or an adapter that the config
// (--config) does not name: a typo would pause nothing, silently, while
// the operator believes the provider is spared. Without --config the name
// cannot be checked; a note on stderr says so.
func checkPauseName(cmd *cobra.Command, configPath, target, name string) error {
	if configPath == "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "drainer: note: %s names are not checked without --config FILE (the config the replicas run): a name no replica knows pauses nothing\n", target)
		return nil
	}
	cfg, err := config.Load(configPath, config.LoadOptions{Check: true})
	if err != nil {
		return usageError{err}
	}
	known := slices.Sorted(maps.Keys(cfg.Routes))
	if target == ops.TargetAdapter {
		known = slices.Sorted(maps.Keys(cfg.Adapters))
	}
	if slices.Contains(known, name) {
		return nil
	}
	msg := fmt.Sprintf("%s names no %s %q, so pausing it would pause nothing", configPath, target, name)
	if s := suggest.Closest(name, known); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	return usagef("%s; its %ss: %s", msg, target, strings.Join(known, ", "))
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
