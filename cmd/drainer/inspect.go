package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/drainer-io/drainer/ops"
	"github.com/spf13/cobra"
)

// inspectFieldWidth bounds payload, response and errors in the human view.
const inspectFieldWidth = 200

func newInspectCmd() *cobra.Command {
	var o opFlags
	cmd := &cobra.Command{
		Use:   "inspect KEY",
		Short: "Show one row: all its columns, its run, its saga and its audit trail",
		Long: `Show the row of KEY with all its columns (payload, response, last_error and
last_problem included; long values are truncated in the table view, complete
with --output json), the saga of its run if the run is aborted, the rows of
its run in seq order, and the key's audit trail, verified as
` + "`drainer audit verify`" + ` verifies it: every problem is named by entry
(audit_problems in JSON).

A pruned key answers its final status from the tombstones. KEY may also
name an operator chain: route:TOOL or adapter:NAME (its pauses and
resumes), run:RUN (its aborts and revivals), answered with its audit
entries. A key whose row was deleted outside retention answers its audit
trail and that problem. An unknown key is an error (exit 1).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, done, err := o.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			in, err := c.Inspect(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if o.json() {
				return writeJSON(cmd.OutOrStdout(), in)
			}
			printInspection(cmd.OutOrStdout(), in)
			return nil
		},
	}
	addOpFlags(cmd, &o)
	return cmd
}

func printInspection(w io.Writer, in *ops.Inspection) {
	kv := newTable(w, "FIELD", "VALUE")
	switch {
	case in.Row == nil && in.PrunedAt == nil && !operatorChain(in.Key):
		kv.row("key", in.Key)
		kv.row("row", "none, and no tombstone (see the audit trail's problems below)")
		kv.row("entries", strconv.Itoa(len(in.Audit)))
		_ = kv.flush()
	case in.Row == nil && in.PrunedAt == nil:
		kv.row("chain", in.Key)
		kv.row("entries", strconv.Itoa(len(in.Audit)))
		_ = kv.flush()
	case in.Row == nil:
		kv.row("key", in.Key)
		kv.row("status", string(in.Status))
		kv.row("pruned_at", fmtTimeP(in.PrunedAt))
		_ = kv.flush()
	default:
		printRowFields(kv, in.Row)
		_ = kv.flush()
	}
	if s := in.Saga; s != nil {
		fmt.Fprintf(w, "\nsaga of run %s\n", s.AgentRunID)
		t := newTable(w, "SAGA_STATE", "ABORTED_AT", "ABORTED_BY", "ABORT_REASON", "FORWARD_OPEN", "SUCCEEDED", "COMPENSATED",
			"FAILED", "CANCELLED", "COMPENSATIONS_OPEN", "COMPENSATIONS_FAILED", "NOTE")
		t.row(string(s.SagaState), fmtTime(s.AbortedAt), trunc(s.AbortedBy, 24), trunc(s.AbortReason, 60), i64(s.ForwardOpen),
			i64(s.ForwardSucceeded), i64(s.ForwardCompensated), i64(s.ForwardFailed), i64(s.ForwardCancelled),
			i64(s.CompensationsOpen), i64(s.CompensationsFailed), trunc(ops.Str(s.SagaNote), 60))
		_ = t.flush()
	}
	if in.Row != nil {
		fmt.Fprintf(w, "\nrows of run %s\n", in.AgentRunID)
		t := newTable(w, "SEQ", "KEY", "STEP", "TOOL", "KIND", "STATUS", "ATTEMPTS")
		for _, r := range in.RunRows {
			t.row(i64(r.Seq), r.Key, trunc(r.StepID, 20), trunc(r.ToolName, 24), string(r.Kind), string(r.Status), strconv.Itoa(r.Attempts))
		}
		_ = t.flush()
		if len(in.RunRows) == ops.MaxRunRows {
			fmt.Fprintf(w, "(first %d rows only)\n", ops.MaxRunRows)
		}
	}
	fmt.Fprintln(w, "\naudit")
	t := newTable(w, "ID", "AT", "EVENT", "FROM → TO", "ATTEMPTS", "RESPONSE_STATUS", "ACTOR", "REASON")
	for _, a := range in.Audit {
		t.row(i64(a.ID), fmtTime(a.At), a.Event, transition(a.FromStatus, a.ToStatus), fmtIntP(a.Attempts),
			fmtIntP(a.ResponseStatus), trunc(a.Actor, 24), trunc(ops.Str(a.Reason), 60))
	}
	_ = t.flush()
	printAuditProblems(w, in.AuditProblems)
}

// printAuditProblems says whether the key's audit trail holds, and what is
// wrong with it when it does not.
func printAuditProblems(w io.Writer, problems []ops.BrokenLink) {
	if len(problems) == 0 {
		fmt.Fprintln(w, "audit trail verified: no entry edited, removed or inserted, no change made without it")
		return
	}
	fmt.Fprintf(w, "\nAUDIT TRAIL BROKEN: %d problem(s) (`drainer audit verify` reports them too)\n", len(problems))
	for _, p := range problems {
		fmt.Fprintf(w, "  entry %d: %s\n", p.ID, p.Problem)
	}
}

func printRowFields(t *table, r *ops.Row) {
	long := func(s string) string { return trunc(s, inspectFieldWidth) }
	t.row("key", r.Key)
	t.row("seq", i64(r.Seq))
	t.row("agent_run_id", r.AgentRunID)
	t.row("step_id", r.StepID)
	t.row("tool_name", r.ToolName)
	t.row("business_scope", r.BusinessScope)
	t.row("kind", string(r.Kind))
	t.row("status", string(r.Status))
	t.row("attempts", strconv.Itoa(r.Attempts))
	t.row("next_attempt_at", fmtTime(r.NextAttemptAt))
	t.row("first_attempt_at", fmtTimeP(r.FirstAttemptAt))
	t.row("payload", long(string(r.Payload)))
	t.row("response_status", fmtIntP(r.ResponseStatus))
	t.row("response", long(string(r.Response)))
	t.row("last_error", long(ops.Str(r.LastError)))
	t.row("last_problem", long(string(r.LastProblem)))
	t.row("note", long(ops.Str(r.Note)))
	t.row("forward_key", ops.Str(r.ForwardKey))
	t.row("leased_by", ops.Str(r.LeasedBy))
	t.row("lease_expires_at", fmtTimeP(r.LeaseExpiresAt))
	t.row("created_at", fmtTime(r.CreatedAt))
	t.row("updated_at", fmtTime(r.UpdatedAt))
}

func transition(from, to *string) string {
	if from == nil && to == nil {
		return ""
	}
	return cell(ops.Str(from)) + " → " + cell(ops.Str(to))
}

func i64(n int64) string { return strconv.FormatInt(n, 10) }

// operatorChain reports whether key names an operator chain (route:,
// adapter:, run:), not a row's.
func operatorChain(key string) bool {
	return slices.ContainsFunc(ops.OperatorChains, func(p string) bool { return strings.HasPrefix(key, p) })
}
