package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/drainer-io/drainer/migrations"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/internal/catalog"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/producer"
	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
)

func newEnqueueCmd(g *globals) *cobra.Command {
	var in producer.Intent
	var payload string
	cmd := &cobra.Command{
		Use:   "enqueue --run R --step S --tool T [--scope B] --payload JSON|@FILE|-",
		Short: "Record one intent (prints its key and created or existing)",
		Long: `Record one intent in its own transaction and print its key followed by
created (a new row) or existing (the same tuple and payload were enqueued
before).

--payload takes the JSON itself, @FILE to read it from a file, or - to read
it from standard input. Invalid JSON, or bytes that are not UTF-8, are
refused (exit 2) with the line and column of the first problem, and so is
what PostgreSQL's jsonb cannot store: a NUL character (\u0000) in a string,
or a \uD800-\uDFFF escape without its other half.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := g.requireDB(cmd.Context()); err != nil {
				return err
			}
			p, err := readJSONBPayload(payload, cmd.InOrStdin())
			if err != nil {
				return err
			}
			in.Payload = json.RawMessage(p)
			if err := in.Validate(); err != nil {
				return usageError{err}
			}
			ctx := cmd.Context()
			conn, err := catalog.Connect(ctx, config.Secret(g.databaseURL), "")
			if err != nil {
				return err
			}
			defer conn.Close(ctx)
			var key string
			var created bool
			var status *outbox.Status
			err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				var err error
				if key, created, err = (producer.Producer{Schema: g.schema}).EnqueueTx(ctx, tx, in); err != nil || !created {
					return err
				}
				// In the same transaction: the row as its enqueue made it.
				return tx.QueryRow(ctx, "SELECT status FROM "+pgx.Identifier{g.schema}.Sanitize()+".result($1)", key).Scan(&status)
			})
			var pe *pgconn.PgError
			if errors.As(err, &pe) && (pe.Code == "3F000" || pe.Code == "42883" || pe.Code == "42P01") {
				// No schema, or not this release's: say which, and how to fix it.
				if _, cerr := migrations.Check(ctx, conn, g.schema); cerr != nil {
					return fmt.Errorf("enqueue: %w", cerr)
				}
			}
			if err != nil {
				return err
			}
			word := "existing"
			if created {
				word = "created"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", key, word)
			if status != nil && *status == outbox.StatusCancelled {
				fmt.Fprintf(cmd.ErrOrStderr(), "note: run %s is aborted: the row was created cancelled and will not be sent (drainer inspect %s)\n", in.AgentRunID, key)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&in.AgentRunID, "run", "", "agent_run_id")
	f.StringVar(&in.StepID, "step", "", "step_id")
	f.StringVar(&in.ToolName, "tool", "", "tool_name")
	f.StringVar(&in.BusinessScope, "scope", "", "business_scope (may be empty)")
	f.StringVar(&payload, "payload", "", "JSON payload; @FILE reads it from a file, - from standard input")
	f.StringVar(&in.Traceparent, "traceparent", "", "W3C traceparent to continue at dispatch")
	addDBFlags(cmd, g)
	return cmd
}
