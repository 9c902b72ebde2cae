package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// abort answers drainer_abort_run: the run of the call (its _meta or
// X-Agent-Run-Id) is aborted with the given reason (docs/reference.md §6).
func (g *Gateway) abort(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	ctx, cancel := g.callContext(ctx, time.Now().Add(g.cfg.Wait))
	defer cancel()
	outcome := OutcomeRefused
	defer func() { g.metrics.calls.WithLabelValues(AbortToolName, string(outcome)).Inc() }()
	var header http.Header
	if req.Extra != nil {
		header = req.Extra.Header
	}
	run, ok, err := metaString(req.Params.Meta, MetaAgentRunID)
	if err != nil {
		return nil, invalidParams(err.Error())
	}
	if !ok {
		run = header.Get(HeaderAgentRunID)
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
	n, err := g.cfg.Store.AbortRun(ctx, g.cfg.DB, run, args.Reason, "gateway")
	if err != nil {
		return nil, invalidParams(fmt.Sprintf("could not abort run %q: %v", run, err))
	}
	outcome = OutcomeCreated
	g.log.Info("gateway: run aborted by its agent", "agent_run_id", run, "cancelled_rows", n)
	return textResult(sdk.Meta{MetaAgentRunID: run}, fmt.Sprintf("Run %s is aborted: %d steps not yet sent were cancelled; its completed steps whose route names a compensation are compensated in reverse order (the others stay as they are).", run, n)), nil
}
