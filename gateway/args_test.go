package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/gateway"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// numbers decodes JSON arguments keeping each number's text.
func numbers(t *testing.T, args string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(args))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("arguments %s: %v", args, err)
	}
	return m
}

// rawCall calls tool with arguments written as JSON text (numbers as
// written), through the SDK's client.
func rawCall(t *testing.T, s *sdk.ClientSession, tool, args string, meta sdk.Meta) (*sdk.CallToolResult, error) {
	t.Helper()
	return s.CallTool(context.Background(), &sdk.CallToolParams{Name: tool, Arguments: json.RawMessage(args), Meta: meta})
}

// TestArgumentsReachTheToolAsSent: the payload recorded and sent is the
// call's arguments with every number as the agent wrote it, recorded and
// read-only calls alike; two calls whose numbers differ only past a
// double's precision are two steps (two effects), and the same tuple
// with such other arguments is a conflict, while equal values (key order,
// 1.0 and 1) are still one call. Before, the canonical JSON (numbers as
// doubles) was recorded and sent: 9007199254740993 reached the tool as
// 9007199254740992, and a call with 9007199254740992 was answered as the
// first one's replay.
func TestArgumentsReachTheToolAsSent(t *testing.T) {
	t.Parallel()
	g := startGateway(t, 2*time.Minute)
	s := g.client(t, agentHeaders("run-exact"))
	first, err := rawCall(t, s, "charge", `{"id":9007199254740993, "p":0.1}`, nil)
	if err != nil || first.IsError {
		t.Fatalf("first call: %v %v", err, first)
	}
	second, err := rawCall(t, s, "charge", `{"id":9007199254740992,"p":0.1}`, nil)
	if err != nil || second.IsError || second.Meta[gateway.MetaReplay] != nil || second.Meta[gateway.MetaKey] == first.Meta[gateway.MetaKey] {
		t.Fatalf("a call with another id (past a double's precision): %v %v; want a call of its own", err, second)
	}
	big, err := rawCall(t, s, "charge", `{"id":12345678901234567890,"p":0.1}`, nil)
	if err != nil || big.IsError {
		t.Fatalf("a call with a 20-digit id: %v %v", err, big)
	}
	// The same value again, in another order and spelling: a replay.
	again, err := rawCall(t, s, "charge", `{"p":1.0e-1,"id":9007199254740993.0}`, nil)
	if err != nil || again.Meta[gateway.MetaReplay] != true || again.Meta[gateway.MetaKey] != first.Meta[gateway.MetaKey] {
		t.Fatalf("the first call again: %v %v; want its replay", err, again)
	}
	got := g.ts.argsOf("charge")
	want := []string{"9007199254740993", "9007199254740992", "12345678901234567890"}
	if len(got) != len(want) {
		t.Fatalf("the tool got %d calls %v; want %d", len(got), got, len(want))
	}
	for i, args := range got {
		m := numbers(t, args)
		if m["id"] != json.Number(want[i]) || m["p"] != json.Number("0.1") {
			t.Errorf("call %d reached the tool with %s; want id %s and p 0.1", i, args, want[i])
		}
	}
	var payload string
	if err := g.pool.QueryRow(context.Background(), `SELECT payload::text FROM drainer.outbox WHERE key = $1`,
		first.Meta[gateway.MetaKey]).Scan(&payload); err != nil || numbers(t, payload)["id"] != json.Number("9007199254740993") {
		t.Fatalf("recorded payload %s (%v); want id 9007199254740993", payload, err)
	}

	// A named step: the same tuple with an id past a double's precision
	// is a conflict, not a replay.
	step := sdk.Meta{gateway.MetaStepID: "pay"}
	if r, err := rawCall(t, s, "charge", `{"id":9007199254740993}`, step); err != nil || r.IsError {
		t.Fatalf("named step: %v %v", err, r)
	}
	_, err = rawCall(t, s, "charge", `{"id":9007199254740992}`, step)
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("the named step with another id: %v; want -32602 (a conflict)", err)
	}
	if r, err := rawCall(t, s, "charge", `{"id": 9007199254740993}`, step); err != nil || r.Meta[gateway.MetaReplay] != true {
		t.Fatalf("the named step with the same id: %v %v; want its replay", err, r)
	}
	if n := g.ts.count(g.ts.effects, "charge"); n != 4 {
		t.Fatalf("%d effects upstream, want 4", n)
	}

	// A read-only call passed straight through: its arguments as sent.
	if r, err := rawCall(t, s, "lookup", `{"id":12345678901234567890}`, nil); err != nil || r.IsError {
		t.Fatalf("lookup: %v %v", err, r)
	}
	if got := g.ts.argsOf("lookup"); len(got) != 1 || numbers(t, got[0])["id"] != json.Number("12345678901234567890") {
		t.Fatalf("lookup reached the tool with %v; want id 12345678901234567890", got)
	}
}

// TestEmptyMetaRunIDFallsBackToTheHeader: an empty
// _meta["io.drainer/agent_run_id"] counts as absent, as an empty step_id
// does: the run is the X-Agent-Run-Id header's, for a call and for
// drainer_abort_run alike. Before, the empty string overrode the header
// and the call was refused as naming no run.
func TestEmptyMetaRunIDFallsBackToTheHeader(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	d := newDirect(t, pool, gateway.Config{Wait: 500 * time.Millisecond, AbortTool: true})
	s := d.client(t, "run-header")
	empty := sdk.Meta{gateway.MetaAgentRunID: ""}
	res, err := s.CallTool(context.Background(), &sdk.CallToolParams{Name: "charge", Arguments: map[string]any{"amount": 1}, Meta: empty})
	if err != nil {
		t.Fatalf("a call with an empty _meta run id and the header: %v; want it recorded in the header's run", err)
	}
	var run string
	if err := pool.QueryRow(context.Background(), `SELECT agent_run_id FROM drainer.outbox WHERE key = $1`, res.Meta[gateway.MetaKey]).Scan(&run); err != nil || run != "run-header" {
		t.Fatalf("the call's row is in run %q (%v); want run-header", run, err)
	}
	ab, err := s.CallTool(context.Background(), &sdk.CallToolParams{Name: gateway.AbortToolName, Arguments: map[string]any{"reason": "test"}, Meta: empty})
	if err != nil || ab.IsError || !strings.Contains(text(ab), "Run run-header is aborted") {
		t.Fatalf("drainer_abort_run with an empty _meta run id: %v %v; want the header's run aborted", err, ab)
	}
}
