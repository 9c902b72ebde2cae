package main

import (
	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/tooling/demo"
	"github.com/spf13/cobra"
)

func newDemoCmd() *cobra.Command {
	opts := demo.Options{}
	var withGateway bool
	cmd := &cobra.Command{
		Use:   "demo [--gateway]",
		Short: "Drain sample intents against a throwaway Postgres and a built-in mock provider",
		Long: `Start a throwaway Postgres (local binaries, else Docker) and a mock provider that
fails transiently and refuses some tools, enqueue sample intents (some failing,
one saga), drain them with the daemon, print a summary, and leave nothing running.

With --gateway: drainer run with its MCP gateway in front of a built-in mock MCP
tool server; an agent calls charge_card through the gateway, the harness cuts
the call while the tool works and re-sends it twice under new request ids; the
summary shows each answer and one effect upstream (exit 1 otherwise).

The demo prints progress and a summary; the daemon's logs go to a file, named
on the first line ("logs: /tmp/drainer-demo-…/drainer-demo.log").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Checked before anything starts.
			if opts.Workers < 1 || opts.Workers > config.MaxWorkers {
				return usagef("%s: must be between 1 and %d, got %d", flagRef(cmd, "workers"), config.MaxWorkers, opts.Workers)
			}
			if opts.Runs < 1 {
				return usagef("%s: must be at least 1, got %d", flagRef(cmd, "runs"), opts.Runs)
			}
			// The demo prints progress and a summary; the daemon's logs go
			// to a file it names on its first line.
			opts.Out, opts.Err, opts.Version = cmd.OutOrStdout(), cmd.ErrOrStderr(), version
			if withGateway {
				return demo.RunGateway(cmd.Context(), opts)
			}
			return demo.Run(cmd.Context(), opts)
		},
	}
	cmd.Flags().IntVar(&opts.Runs, "runs", 100, "ordinary two-step runs to enqueue")
	cmd.Flags().IntVar(&opts.Workers, "workers", 16, "worker slots")
	cmd.Flags().BoolVar(&withGateway, "gateway", false, "the MCP gateway scenario: a call cut mid-call and re-sent twice, one effect upstream")
	return cmd
}
