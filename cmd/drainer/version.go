package main

import (
	"fmt"
	"runtime"

	"github.com/drainer-io/drainer/migrations"
	"github.com/spf13/cobra"
)

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "drainer %s (schema version %d, %s)\n", version, migrations.Latest(), runtime.Version())
			return nil
		},
	}
}
