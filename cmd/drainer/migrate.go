package main

import (
	"fmt"

	"github.com/drainer-io/drainer/migrations"
	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
)

func newMigrateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply the schema migrations (idempotent; safe from many replicas at once)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := g.requireDB(); err != nil {
				return err
			}
			log := cmdLogger(cmd)
			conn, err := pgx.Connect(cmd.Context(), g.databaseURL)
			if err != nil {
				return fmt.Errorf("connect: %w", err)
			}
			defer conn.Close(cmd.Context())
			n, err := migrations.Migrate(cmd.Context(), conn, g.schema, log)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schema %s at version %d (%d applied)\n", g.schema, migrations.Latest(), n)
			return nil
		},
	}
	addDBFlags(cmd, g)
	return cmd
}
