package main

import (
	"fmt"
	"os"

	"github.com/drainer-io/drainer/internal/openapiroutes"
	"github.com/spf13/cobra"
)

// newRoutesCmd is `drainer routes`, whose one subcommand is import.
func newRoutesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "routes",
		Short: "Generate routes from other sources",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newRoutesImportCmd())
	return cmd
}

// routesImportOpts are the flags of `drainer routes import`.
type routesImportOpts struct {
	openapi, adapter string
	allowUnsafe      bool
}

// Validate checks that both flags are given.
func (o routesImportOpts) Validate() error {
	switch {
	case o.openapi == "":
		return usagef("--openapi is required")
	case o.adapter == "":
		return usagef("--adapter is required")
	}
	return nil
}

func newRoutesImportCmd() *cobra.Command {
	var o routesImportOpts
	cmd := &cobra.Command{
		Use:   "import --openapi FILE --adapter NAME",
		Short: "Print the routes: YAML for the x-agent-idempotency operations of an OpenAPI 3 document",
		Long: `Reads an OpenAPI 3.0 or 3.1 document (YAML or JSON) whose operations carry
the x-agent-idempotency extension and prints the routes: section for them on
stdout: tool_name = operationId, adapter NAME, the class, the operation's
method and path, key_ttl from ttl_seconds, idempotency_key from
key_field/key_location, compensation from the compensation triplet and a
detect probe from its detection when it is "GET /path" with only {key} and
{tool_name}. read_only operations are not routed. Each path parameter is
filled from the row's payload; when the JSON request body schema does not
declare the path parameters the route gets body: without_path_fields (the
payload without them is the body), else the payload is the body.
Operations marked agent_safe: false are refused unless --allow-unsafe is
given. Every problem of every operation is reported at once (exit 2); a
YAML or JSON syntax error names FILE:LINE:COL.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			data, err := os.ReadFile(o.openapi)
			if err != nil {
				return usagef("read --openapi: %v", err)
			}
			res, err := openapiroutes.Import(o.openapi, data, openapiroutes.Options{AllowUnsafe: o.allowUnsafe})
			if err != nil {
				return usageError{err}
			}
			if err := openapiroutes.WriteYAML(cmd.OutOrStdout(), o.openapi, o.adapter, res); err != nil {
				return fmt.Errorf("write routes: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&o.openapi, "openapi", "", "OpenAPI 3 document, YAML or JSON (env DRAINER_OPENAPI)")
	cmd.Flags().StringVar(&o.adapter, "adapter", "", "adapter name the routes use (env DRAINER_ADAPTER)")
	cmd.Flags().BoolVar(&o.allowUnsafe, "allow-unsafe", false, "route agent_safe: false operations too, marked with a comment (env DRAINER_ALLOW_UNSAFE)")
	return cmd
}
