package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// abort answers drainer_abort_run: the run of the call (its _meta or
// X-Agent-Run-Id) is aborted with the given reason (docs/reference.md §6).
func (g *Gateway) abort(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	start := time.Now()
	ctx, cancel := g.callContext(ctx, start.Add(g.waitFor()))
	defer cancel()
	outcome := OutcomeRefused
	defer func() {
		g.metrics.calls.WithLabelValues(AbortToolName, string(outcome)).Inc()
		g.metrics.seconds.WithLabelValues(AbortToolName).Observe(time.Since(start).Seconds())
	}()
	var header http.Header
	if req.Extra != nil {
		header = req.Extra.Header
	}
	run, err := runID(req.Params.Meta, header)
	if err != nil {
		return nil, invalidParams(err.Error())
	}
	if run == "" {
		return nil, invalidParams(errNoRun.Error())
	}
	var args struct {
		Reason string `json:"reason"`
	}
	if len(req.Params.Arguments) > 0 {
		if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
			return nil, invalidParams("drainer_abort_run arguments: want {\"reason\": text}")
		}
	}
	if strings.TrimSpace(args.Reason) == "" {
		return nil, invalidParams("drainer_abort_run needs a reason")
	}
	// One statement, safe to run again (the first abort's record is kept):
	// again on a live connection when its connection was lost.
	var n int
	_, err = g.onLive(ctx, func(db store.DB) (err error) {
		n, err = g.cfg.Store.AbortRun(ctx, db, run, args.Reason, "gateway")
		return err
	})
	if err != nil {
		return nil, abortError(run, err)
	}
	outcome = OutcomeCreated
	g.log.Info("gateway: run aborted by its agent", "agent_run_id", run, "cancelled_rows", n)
	return textResult(sdk.Meta{MetaAgentRunID: run}, fmt.Sprintf("Run %s is aborted: %d steps not yet sent were cancelled; its completed steps whose route names a compensation are compensated in reverse order (the others stay as they are).", run, n)), nil
}

// abortError is the answer to an abort the database refused or did not
// answer: -32602 when it refused what the call names (a run id it does not
// take, say), else -32603 (a failure of the database, a lost connection, a
// statement given up on that the server may still finish): calling again
// is safe.
func abortError(run string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code[:2] == "22" || pgErr.Code[:2] == "23") {
		return invalidParams(fmt.Sprintf("run %q cannot be aborted: %s; nothing was changed", run, pgErr.Message))
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError,
		Message: fmt.Sprintf("drainer could not confirm the abort of run %q: %v; it may or may not have been recorded: call drainer_abort_run again, which is safe (a run aborted twice is aborted once)", run, err)}
}
