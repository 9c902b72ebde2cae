package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/drainer-io/drainer/dispatch"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Tool is one tool the gateway lists and serves: a routed tool of an mcp
// adapter.
type Tool struct {
	// Name is the tool's name (its route's tool_name).
	Name string
	// Adapter names the route's adapter, for logs and errors.
	Adapter string
	// Definition is the server's own tools/list entry (title, description,
	// schemas, annotations), listed as it is.
	Definition json.RawMessage
	// Passthrough: the route is naturally_idempotent and the tool says it
	// is read-only; its calls are sent straight to the server with Send,
	// unrecorded.
	Passthrough bool
	// Send sends one call to the server (the adapter's Dispatch).
	Send func(ctx context.Context, m *dispatch.Message) dispatch.Result
	// Oversized returns the whole result of the call of key when it was too
	// large to record and this process sent it lately (nil: never).
	Oversized func(key string) (json.RawMessage, bool)

	// typed: the tool's definition declares an outputSchema (set by
	// AddTools), so a client rejects a result that is not isError without
	// structuredContent (answer).
	typed bool
}

// AbortToolName is the tool that aborts the run of the call (abort_tool: true).
const AbortToolName = "drainer_abort_run"

// AddTools lists and serves tools (replacing a tool of the same name). A
// definition the SDK cannot serve (no object input schema, say) is an error
// naming the tool and its adapter; the other tools are added.
func (g *Gateway) AddTools(tools ...Tool) error {
	var errs []error
	for i := range tools {
		t := tools[i]
		def, err := definition(t)
		if err == nil {
			t.typed = def.OutputSchema != nil
			err = g.addTool(def, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
				return g.call(ctx, &t, req)
			})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("gateway: tool %s of adapter %s: %w", t.Name, t.Adapter, err))
			continue
		}
		g.mu.Lock()
		g.tools[t.Name] = &t
		delete(g.awaited, t.Name)
		g.mu.Unlock()
	}
	return errors.Join(errs...)
}

// Await marks tools (tool → adapter) as routed to a server that has not
// answered yet: a call of one is refused with 503 and Retry-After, saying
// that its server has not answered and that nothing was recorded or sent,
// rather than as a tool nobody routed. Until the tool is added (AddTools)
// or its server answers without it (Answered).
func (g *Gateway) Await(tools map[string]string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.awaited == nil {
		g.awaited = map[string]string{}
	}
	for t, a := range tools {
		if _, ok := g.tools[t]; !ok {
			g.awaited[t] = a
		}
	}
}

// Answered says adapter's server answered tools/list: those of its routed
// tools it did not offer are unknown tools from now on.
func (g *Gateway) Answered(adapter string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for t, a := range g.awaited {
		if a == adapter {
			delete(g.awaited, t)
		}
	}
}

// awaitedAdapter returns the adapter of an awaited tool named by a
// tools/call's body (Await).
func (g *Gateway) awaitedAdapter(body []byte) (tool, adapter string, id any, ok bool) {
	g.mu.RLock()
	none := len(g.awaited) == 0
	g.mu.RUnlock()
	if none {
		return "", "", nil, false
	}
	req, isCall := toolsCall(body)
	if !isCall {
		return "", "", nil, false
	}
	var p struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(req.Params, &p) != nil {
		return "", "", nil, false
	}
	g.mu.RLock()
	adapter, ok = g.awaited[p.Name]
	g.mu.RUnlock()
	return p.Name, adapter, req.ID.Raw(), ok
}

// definition decodes a tool's tools/list entry for the SDK, keeping its
// schemas as the server wrote them.
func definition(t Tool) (*sdk.Tool, error) {
	var raw struct {
		InputSchema  json.RawMessage `json:"inputSchema"`
		OutputSchema json.RawMessage `json:"outputSchema"`
	}
	def := &sdk.Tool{}
	if len(t.Definition) > 0 {
		if err := json.Unmarshal(t.Definition, def); err != nil {
			return nil, fmt.Errorf("its tools/list entry: %v", err)
		}
		if err := json.Unmarshal(t.Definition, &raw); err != nil {
			return nil, fmt.Errorf("its tools/list entry: %v", err)
		}
	}
	def.Name = t.Name
	def.InputSchema = json.RawMessage(`{"type":"object"}`)
	if len(raw.InputSchema) > 0 && string(raw.InputSchema) != "null" {
		def.InputSchema = raw.InputSchema
	}
	def.OutputSchema = nil
	if len(raw.OutputSchema) > 0 && string(raw.OutputSchema) != "null" {
		def.OutputSchema = raw.OutputSchema
	}
	return def, nil
}

// addTool adds one tool to the SDK server, turning its refusal (a panic)
// into an error.
func (g *Gateway) addTool(def *sdk.Tool, h sdk.ToolHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
			if i := strings.Index(err.Error(), ": "); i > 0 {
				err = errors.New(err.Error()[i+2:])
			}
		}
	}()
	g.mcp.AddTool(def, h)
	return nil
}

// addAbortTool lists drainer_abort_run: it aborts the run of the call
// (docs/reference.md §6), so its completed steps are compensated.
func (g *Gateway) addAbortTool() {
	readOnly, destructive, idempotent := false, true, true
	def := &sdk.Tool{
		Name: AbortToolName,
		Description: "Abort this agent run: drainer cancels its steps not yet sent and runs the compensations " +
			"of its completed steps, in reverse order. Call it when a step turned out wrong.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"reason":{"type":"string","description":"why the run is aborted"}},"required":["reason"]}`),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: readOnly, DestructiveHint: &destructive, IdempotentHint: idempotent},
	}
	g.mcp.AddTool(def, g.abort)
}
