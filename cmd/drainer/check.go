package main

import (
	"fmt"

	"github.com/drainer-io/drainer/config"
	"github.com/spf13/cobra"
)

func newCheckCmd() *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "check --config FILE",
		Short: "Validate a config file without connecting anywhere or needing secrets",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if path == "" {
				return usagef("--config is required")
			}
			cfg, err := config.Load(path, config.LoadOptions{Check: true})
			if err != nil {
				return usageError{err}
			}
			for _, w := range cfg.Warnings {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (%s)\n", path, cfg.Summary())
			return nil
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "config file (YAML)")
	return cmd
}
