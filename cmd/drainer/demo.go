package main

import (
	"github.com/drainer-io/drainer/tooling/demo"
	"github.com/spf13/cobra"
)

func newDemoCmd() *cobra.Command {
	opts := demo.Options{}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Drain sample intents against a throwaway Postgres and a built-in mock provider",
		Long: `Start a throwaway Postgres (local binaries, else Docker) and a mock provider that
fails transiently and refuses some tools, enqueue sample intents (some failing,
one saga), drain them with the daemon, print a summary, and leave nothing running.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Out, opts.Err, opts.Version, opts.Logger = cmd.OutOrStdout(), cmd.ErrOrStderr(), version, cmdLogger(cmd)
			return demo.Run(cmd.Context(), opts)
		},
	}
	cmd.Flags().IntVar(&opts.Runs, "runs", 100, "ordinary two-step runs to enqueue")
	cmd.Flags().IntVar(&opts.Workers, "workers", 16, "worker slots")
	return cmd
}
