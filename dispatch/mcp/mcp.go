package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/wire"
)

// Protocol revisions the adapter speaks (docs/reference.md §5).
const (
	Revision20250618 = "2025-06-18"
	Revision20251125 = "2025-11-25"
	// Revision20260728 is stateless: no initialize and no session; every
	// request carries the revision and the client's identity in _meta.
	Revision20260728 = "2026-07-28"
)

// ProtocolVersions are the revisions the adapter negotiates, newest first: it
// asks for 2026-07-28 with server/discover, and falls back to initialize
// (asking for 2025-11-25) when the server does not offer it.
var ProtocolVersions = []string{Revision20260728, Revision20251125, Revision20250618}

// Meta keys of tools/call (docs/reference.md §5).
const (
	MetaKey   = "io.drainer/idempotency-key"
	MetaTuple = "io.drainer/tuple"
	// MetaReplay, true in a result's _meta, says the server answered from its
	// idempotency record: the effect happened on an earlier attempt (Replay).
	MetaReplay = "io.drainer/replay"
	// MetaTraceparent carries the row's W3C trace context, when it has one.
	MetaTraceparent = "traceparent"
	// The per-request fields of the stateless revision 2026-07-28.
	MetaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	MetaClientInfo         = "io.modelcontextprotocol/clientInfo"
	MetaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
)

// Reasons of this adapter, beside dispatch's HTTP ones.
const (
	ReasonToolError      = "mcp_tool_error"      // result isError: true
	ReasonInvalidRequest = "mcp_invalid_request" // JSON-RPC -32700, -32600..-32602
	ReasonRPCError       = "mcp_rpc_error"       // any other JSON-RPC error
	ReasonSessionExpired = "mcp_session_expired" // the server no longer knows the session (404, 400 naming it)
	ReasonProtocol       = "mcp_protocol"        // not an MCP answer, or an old revision
	ReasonInit           = "mcp_init"            // the session could not be initialised
	// ReasonNotReady (dispatch.ReasonNotReady): unreachable since startup and
	// still connecting in the background, or the server lacks the row's tool.
	ReasonNotReady   = dispatch.ReasonNotReady
	ReasonTooLarge   = "mcp_message_too_large"
	ReasonBadPayload = "payload_not_object"
)

// methodToolsCall is the JSON-RPC method of a tool call.
const methodToolsCall = "tools/call"

// conn is what one negotiation established.
type conn struct {
	session   string // Mcp-Session-Id, "" without a session
	proto     string // the negotiated revision
	stateless bool   // 2026-07-28: no session, _meta on every request
}

// Adapter dispatches rows as MCP tools/call requests over Streamable HTTP,
// one session (or none, on the stateless revision) per adapter. It is safe
// for concurrent use.
type Adapter struct {
	cfg    Config
	client *http.Client
	nextID atomic.Int64
	// oversized keeps the last results too large to record, briefly.
	oversized oversizedCache
	// large holds a value per call reading an answer past largeAnswer
	// (budget.go); largeWaiting counts the calls waiting for one.
	large        chan struct{}
	largeWaiting atomic.Int32

	mu    sync.Mutex
	ready bool // negotiated
	cur   conn

	// A start in the background (StartInBackground).
	bg      dispatch.Background              // rows wait until the server answered and tools/list was read
	missing atomic.Pointer[map[string]error] // tools the server lacks, read when it connected
}

// New returns an adapter for cfg; it does not connect (Init, CheckRoutes or
// the first Dispatch does).
func New(cfg Config) (*Adapter, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Adapter{cfg: cfg, client: dispatch.NewHTTPClient(min(cfg.Timeout, 10*time.Second), cfg.Transport),
		large: make(chan struct{}, largeSlots(cfg))}, nil
}

// Close stops a background start, ends the session (best effort) and
// closes idle connections.
func (a *Adapter) Close(ctx context.Context) error {
	a.bg.Stop()
	a.oversized.stop()
	a.mu.Lock()
	c := a.cur
	a.ready, a.cur = false, conn{}
	a.mu.Unlock()
	if c.session != "" {
		ctx, cancel := context.WithTimeout(ctx, min(a.cfg.Timeout, 5*time.Second))
		defer cancel()
		if req, err := dispatch.NewRequest(ctx, http.MethodDelete, a.cfg.URL, nil); err == nil {
			a.headers(req, c, "", "", "")
			if resp, err := a.client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
				resp.Body.Close()
			}
		}
	}
	a.client.CloseIdleConnections()
	return nil
}

// Dispatch sends m as one tools/call. When the server answers that it no
// longer knows the session (it restarted), the session is re-established
// and the call sent again with the same key, once: the refused call never
// reached the tool. Any other failure is returned to the engine, which
// decides the next attempt.
func (a *Adapter) Dispatch(ctx context.Context, m *dispatch.Message) dispatch.Result {
	args := bytes.TrimLeft(m.Payload, " \t\r\n")
	if len(args) == 0 || args[0] != '{' || !json.Valid(args) {
		return dispatch.Result{Outcome: dispatch.Terminal, NotSent: true, Reason: ReasonBadPayload,
			Err: errors.New("mcp: the payload must be a JSON object (it becomes the tool's arguments)")}
	}
	if r, ok := a.admit(m.Tuple.ToolName); !ok {
		return r
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	meta := map[string]any{
		MetaKey: m.Key,
		MetaTuple: map[string]string{
			"agent_run_id":   m.Tuple.AgentRunID,
			"step_id":        m.Tuple.StepID,
			"tool_name":      m.Tuple.ToolName,
			"business_scope": m.Tuple.BusinessScope,
		},
	}
	if wire.ValidTraceparent(m.Traceparent) {
		meta[MetaTraceparent] = m.Traceparent
	}
	params := map[string]any{"name": m.Tuple.ToolName, "arguments": json.RawMessage(args)}
	hold := &answerHold{a: a}
	defer hold.release() // once the answer and its copies are dropped or kept within their limits
	msg, status, h, r, ok := a.request(ctx, methodToolsCall, params, meta, m.Key, m.Tuple.ToolName, hold)
	if !ok {
		return r
	}
	if msg.Error != nil {
		return rpcErrorResult(status, msg.Error)
	}
	res := a.toolResult(status, h, msg.Result)
	if len(res.Record) > a.cfg.RecordLimit {
		// Too large to keep: the gateway's call waiting for it in this
		// process still gets it (Oversized); the record says it was not kept.
		a.oversized.put(m.Key, res.Record)
		res.Record = json.RawMessage(fmt.Sprintf(`{%q:%d}`, MetaTooLarge, len(res.Record)))
	}
	return res
}

// Oversized returns the whole result of the call of key when it was too
// large to record and was answered lately (within oversizedTTL) in this
// process: the MCP gateway answers the call waiting for it with it.
func (a *Adapter) Oversized(key string) (json.RawMessage, bool) { return a.oversized.get(key) }

// request sends one JSON-RPC request on the current session, negotiating
// one first when there is none, and once more on a new session when the
// server no longer knows the old one. meta (may be nil) is merged into
// params._meta with, on the stateless revision, the revision and the
// client's identity. hold (may be nil) bounds the reading of a large
// answer (budget.go).
func (a *Adapter) request(ctx context.Context, method string, params, meta map[string]any, key, name string, hold *answerHold) (*rpcMessage, int, http.Header, dispatch.Result, bool) {
	for try := 0; ; try++ {
		c, r, ok := a.ensure(ctx)
		if !ok {
			return nil, 0, nil, r, false
		}
		p := maps.Clone(params)
		if m := a.meta(c, meta); len(m) > 0 {
			p["_meta"] = m
		}
		msg, status, h, r, ok := a.call(ctx, c, method, p, key, name, hold)
		if !ok && r.Reason == ReasonSessionExpired {
			a.expire(c)
		}
		if !ok && r.Reason == ReasonSessionExpired {
			if try == 0 {
				a.cfg.Logger.Info("mcp: the server no longer knows the session (restarted?); re-establishing it and sending the call again with the same key",
					"method", method, "status", status)
				continue
			}
			// Refused again on a session just established: not a lost
			// session; the answer is classified as what it says (bounded:
			// never a loop of free resends).
			if sl, isLost := errors.AsType[*sessionLostError](r.Err); isLost {
				r = sl.plain
				r.Err = fmt.Errorf("mcp: refused again on a new session: %w", r.Err)
			}
		}
		return msg, status, h, r, ok
	}
}

// meta returns the _meta of one request on c: extra, plus the per-request
// fields of the stateless revision.
func (a *Adapter) meta(c conn, extra map[string]any) map[string]any {
	m := maps.Clone(extra)
	if c.stateless {
		if m == nil {
			m = map[string]any{}
		}
		m[MetaProtocolVersion] = c.proto
		m[MetaClientInfo] = a.clientInfo()
		m[MetaClientCapabilities] = map[string]any{}
	}
	return m
}

func (a *Adapter) clientInfo() map[string]string {
	return map[string]string{"name": "drainer", "version": a.cfg.ClientVersion}
}
