package main

import (
	"fmt"

	"github.com/drainer-io/drainer/ops"
	"github.com/spf13/cobra"
)

func newAuditCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Work with the tamper-evident audit trail",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef("audit needs a subcommand: verify")
		},
	}
	cmd.AddCommand(newAuditVerifyCmd())
	return cmd
}

func newAuditVerifyCmd() *cobra.Command {
	var o opFlags
	var limit int
	cmd := &cobra.Command{
		Use:   "verify [--limit N]",
		Short: "Check every hash chain of the audit trail",
		Long: `Check every per-key hash chain of the audit trail. Exit 0 printing
"audit: N entries in M chains verified" when all verify; exit 1 listing the
first --limit broken links (id, key, problem): an entry whose content no
longer matches its hash was edited; an entry whose link does not match the
entry before it follows one that was removed or inserted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 {
				return usagef("--limit: must be positive, got %d", limit)
			}
			c, done, err := o.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			v, err := c.VerifyAudit(cmd.Context(), limit)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if o.json() {
				if err := writeJSON(w, v); err != nil {
					return err
				}
			} else if v.OK {
				fmt.Fprintf(w, "audit: %d entries in %d chains verified\n", v.Entries, v.Chains)
			} else {
				t := newTable(w, "ID", "KEY", "PROBLEM")
				for _, b := range v.Broken {
					t.row(i64(b.ID), b.Key, b.Problem)
				}
				_ = t.flush()
			}
			if !v.OK {
				return fmt.Errorf("audit: %d broken link(s) in %d entries (first listed above)", len(v.Broken), v.Entries)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&limit, "limit", ops.DefaultVerifyLimit, "report at most N broken links")
	addOpFlags(cmd, &o)
	return cmd
}
