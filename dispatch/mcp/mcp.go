package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/drainer-io/drainer/dispatch"
)

// ProtocolVersion is the MCP revision the adapter requests; a server that
// answers with an older one is refused (CONTRACT §5).
const ProtocolVersion = "2025-06-18"

// Meta keys of tools/call (CONTRACT §5).
const (
	MetaKey   = "io.drainer/idempotency-key"
	MetaTuple = "io.drainer/tuple"
	// MetaReplay, true in a result's _meta, says the server answered from its
	// idempotency record: the effect happened on an earlier attempt (Replay).
	MetaReplay = "io.drainer/replay"
)

// Reasons of this adapter, beside dispatch's HTTP ones.
const (
	ReasonToolError      = "mcp_tool_error"      // result isError: true
	ReasonInvalidRequest = "mcp_invalid_request" // JSON-RPC -32700, -32600..-32602
	ReasonRPCError       = "mcp_rpc_error"       // any other JSON-RPC error
	ReasonSessionExpired = "mcp_session_expired" // 404 on a session
	ReasonProtocol       = "mcp_protocol"        // not an MCP answer, or an old revision
	ReasonInit           = "mcp_init"            // the session could not be initialised
	ReasonTooLarge       = "mcp_message_too_large"
	ReasonBadPayload     = "payload_not_object"
)

// Adapter dispatches rows as MCP tools/call requests over Streamable HTTP,
// one session per adapter. It is safe for concurrent use.
type Adapter struct {
	cfg    Config
	client *http.Client
	nextID atomic.Int64

	mu      sync.Mutex
	ready   bool   // initialised
	session string // Mcp-Session-Id, "" for a server without sessions
	proto   string // negotiated revision
}

// New returns an adapter for cfg; it does not connect (Init or the first
// Dispatch does).
func New(cfg Config) (*Adapter, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Adapter{cfg: cfg, client: dispatch.NewHTTPClient(min(cfg.Timeout, 10*time.Second), cfg.Transport)}, nil
}

// Close ends the session (best effort) and closes idle connections.
func (a *Adapter) Close(ctx context.Context) error {
	a.mu.Lock()
	sid, proto := a.session, a.proto
	a.ready, a.session, a.proto = false, "", ""
	a.mu.Unlock()
	if sid != "" {
		ctx, cancel := context.WithTimeout(ctx, min(a.cfg.Timeout, 5*time.Second))
		defer cancel()
		if req, err := dispatch.NewRequest(ctx, http.MethodDelete, a.cfg.URL, nil); err == nil {
			a.headers(req, sid, proto, "")
			if resp, err := a.client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
				resp.Body.Close()
			}
		}
	}
	a.client.CloseIdleConnections()
	return nil
}

// Dispatch sends m as one tools/call. It never re-sends the call itself: a
// failure is returned to the engine, which decides the next attempt.
func (a *Adapter) Dispatch(ctx context.Context, m *dispatch.Message) dispatch.Result {
	args := bytes.TrimLeft(m.Payload, " \t\r\n")
	if len(args) == 0 || args[0] != '{' || !json.Valid(args) {
		return dispatch.Result{Outcome: dispatch.Terminal, NotSent: true, Reason: ReasonBadPayload,
			Err: errors.New("mcp: the payload must be a JSON object (it becomes the tool's arguments)")}
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	sid, proto, r, ok := a.ensure(ctx)
	if !ok {
		return r
	}
	params := map[string]any{
		"name":      m.Tuple.ToolName,
		"arguments": json.RawMessage(args),
		"_meta": map[string]any{
			MetaKey: m.Key,
			MetaTuple: map[string]string{
				"agent_run_id":   m.Tuple.AgentRunID,
				"step_id":        m.Tuple.StepID,
				"tool_name":      m.Tuple.ToolName,
				"business_scope": m.Tuple.BusinessScope,
			},
		},
	}
	msg, status, h, r, ok := a.call(ctx, sid, proto, "tools/call", params, m.Key)
	if !ok {
		return r
	}
	if msg.Error != nil {
		return rpcErrorResult(status, msg.Error)
	}
	return a.toolResult(status, h, msg.Result)
}

// rpcMessage is one JSON-RPC message from the server.
type rpcMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *RPCError       `json:"error"`
}

// RPCError is a JSON-RPC error answer. Its Error text holds the server's
// message, cut short, never the request.
type RPCError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *RPCError) Error() string {
	msg := e.Message
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	return fmt.Sprintf("mcp: JSON-RPC error %d: %s", e.Code, strings.ToValidUTF8(msg, "\uFFFD"))
}

func rpcErrorResult(status int, e *RPCError) dispatch.Result {
	if e.Code == -32700 || (e.Code >= -32602 && e.Code <= -32600) {
		return dispatch.Result{Outcome: dispatch.Terminal, Status: status, Reason: ReasonInvalidRequest, Err: e}
	}
	// Any other error (internal, server-defined) may follow a partial effect.
	return dispatch.Result{Outcome: dispatch.Ambiguous, Status: status, Reason: ReasonRPCError, Err: e}
}

// toolResult classifies a CallToolResult.
func (a *Adapter) toolResult(status int, h http.Header, raw json.RawMessage) dispatch.Result {
	var res struct {
		Content           json.RawMessage `json:"content"`
		StructuredContent json.RawMessage `json:"structuredContent"`
		IsError           bool            `json:"isError"`
		Meta              struct {
			Replay bool `json:"io.drainer/replay"`
		} `json:"_meta"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return dispatch.Result{Outcome: dispatch.Ambiguous, Status: status, Reason: ReasonProtocol,
			Err: errors.New("mcp: tools/call result is not a CallToolResult object")}
	}
	var resp json.RawMessage
	if len(res.StructuredContent) > 0 && string(res.StructuredContent) != "null" {
		resp = dispatch.ResponseJSON("application/json", res.StructuredContent, a.cfg.ResponseLimit)
	} else {
		content := res.Content
		if len(content) == 0 || string(content) == "null" {
			content = json.RawMessage("[]")
		}
		body := append(append([]byte(`{"content":`), content...), '}')
		resp = dispatch.ResponseJSON("application/json", body, a.cfg.ResponseLimit)
	}
	if res.IsError {
		return dispatch.Result{Outcome: dispatch.Terminal, Status: status, Reason: ReasonToolError,
			Response: resp, Err: errors.New("mcp: the tool answered isError: true: " + excerpt(resp))}
	}
	if res.Meta.Replay {
		return dispatch.Result{Outcome: dispatch.Replay, Status: status, Reason: dispatch.ReasonReplay, Response: resp}
	}
	return dispatch.Result{Outcome: dispatch.Success, Status: status, Reason: dispatch.ReasonHTTP2xx, Response: resp}
}

// excerpt returns the start of a stored response, on one line.
func excerpt(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 200 {
		s = strings.ToValidUTF8(s[:200], "") + "…"
	}
	return s
}

// ensure returns the session to use, initialising one when there is none.
// A failure is a Retry that never sent the tool call (NotSent), or Auth.
func (a *Adapter) ensure(ctx context.Context) (sid, proto string, _ dispatch.Result, _ bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ready {
		return a.session, a.proto, dispatch.Result{}, true
	}
	if r, ok := a.initLocked(ctx); !ok {
		if r.Outcome != dispatch.Auth {
			r.Outcome = dispatch.Retry
		}
		r.NotSent = true
		if r.Reason == "" || r.Reason == dispatch.ReasonConnection || r.Reason == dispatch.ReasonTimeout {
			r.Reason = ReasonInit
		}
		return "", "", r, false
	}
	return a.session, a.proto, dispatch.Result{}, true
}

// Init initialises the session now (startup); its error names what is wrong.
func (a *Adapter) Init(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ready {
		return nil
	}
	if r, ok := a.initLocked(ctx); !ok {
		return startupError(r)
	}
	return nil
}

// startupError is the error of a failed startup call: marked
// dispatch.ErrUnavailable when the server could not be reached or answered
// a transient failure (connection, timeout, 408, 429, 5xx), so the daemon
// waits for it instead of treating the config as wrong.
func startupError(r dispatch.Result) error {
	switch {
	case r.Reason == dispatch.ReasonConnect, r.Reason == dispatch.ReasonConnection, r.Reason == dispatch.ReasonTimeout,
		r.Status == http.StatusRequestTimeout, r.Status == http.StatusTooManyRequests, r.Status >= 500:
		return dispatch.MarkUnavailable(r.Err)
	}
	return r.Err
}

func (a *Adapter) initLocked(ctx context.Context) (dispatch.Result, bool) {
	params := map[string]any{
		"protocolVersion": ProtocolVersion,
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]string{"name": "drainer", "version": a.cfg.UserAgent},
	}
	msg, status, h, r, ok := a.call(ctx, "", "", "initialize", params, "")
	if !ok {
		r.Err = fmt.Errorf("mcp initialize: %w", r.Err)
		return r, false
	}
	if msg.Error != nil {
		return dispatch.Result{Outcome: dispatch.Retry, Status: status, Reason: ReasonInit,
			Err: fmt.Errorf("mcp initialize: %w", msg.Error)}, false
	}
	var res struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if err := json.Unmarshal(msg.Result, &res); err != nil || res.ProtocolVersion == "" {
		return dispatch.Result{Outcome: dispatch.Retry, Status: status, Reason: ReasonProtocol,
			Err: errors.New("mcp initialize: the answer carries no protocolVersion: not an MCP server?")}, false
	}
	if res.ProtocolVersion < ProtocolVersion {
		return dispatch.Result{Outcome: dispatch.Retry, Status: status, Reason: ReasonProtocol,
			Err: fmt.Errorf("mcp initialize: the server speaks MCP protocol revision %q; drainer needs %s or later",
				oneLine(res.ProtocolVersion), ProtocolVersion)}, false
	}
	sid := h.Get("Mcp-Session-Id")
	a.session, a.proto = sid, res.ProtocolVersion
	// notifications/initialized: a notification, answered 202.
	if r, ok := a.notify(ctx, sid, res.ProtocolVersion, "notifications/initialized"); !ok {
		a.session, a.proto = "", ""
		r.Err = fmt.Errorf("mcp notifications/initialized: %w", r.Err)
		return r, false
	}
	a.ready = true
	return dispatch.Result{}, true
}

func oneLine(s string) string {
	if len(s) > 40 {
		s = s[:40]
	}
	return strings.ToValidUTF8(strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, s), "")
}

// expire forgets session sid if it is still the current one.
func (a *Adapter) expire(sid string) {
	a.mu.Lock()
	if a.session == sid {
		a.ready, a.session, a.proto = false, "", ""
	}
	a.mu.Unlock()
}

func (a *Adapter) headers(req *http.Request, sid, proto, key string) {
	for k, v := range a.cfg.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("User-Agent", a.cfg.UserAgent)
	req.Header.Set("Accept", "application/json, text/event-stream")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	if proto != "" {
		req.Header.Set("Mcp-Protocol-Version", proto)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
}

func (a *Adapter) notify(ctx context.Context, sid, proto, method string) (dispatch.Result, bool) {
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method})
	req, err := dispatch.NewRequest(ctx, http.MethodPost, a.cfg.URL, body)
	if err != nil {
		return dispatch.Result{Outcome: dispatch.Terminal, NotSent: true, Err: errors.New("mcp: cannot build the request")}, false
	}
	req.Header.Set("Content-Type", "application/json")
	a.headers(req, sid, proto, "")
	var tr dispatch.SendTracker
	req = req.WithContext(tr.Trace(ctx))
	resp, err := a.client.Do(req)
	if err != nil {
		return dispatch.ClassifyTransportError(ctx, err, tr.MaybeSent()), false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return httpResult(resp, nil), false
	}
	return dispatch.Result{}, true
}

// httpResult classifies a non-2xx answer (or a 2xx the caller refuses).
func httpResult(resp *http.Response, body []byte) dispatch.Result {
	out, reason := dispatch.ClassifyHTTP(resp.StatusCode, resp.Header)
	r := dispatch.Result{Outcome: out, Status: resp.StatusCode, Reason: reason}
	if d, ok := dispatch.ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
		r.RetryAfter = d
	}
	r.Err = dispatch.NewHTTPError(resp.StatusCode, body, dispatch.ParseProblem(resp.Header.Get("Content-Type"), body))
	return r
}

// call sends one JSON-RPC request and reads its answer, from a JSON body or
// an SSE stream. ok is false with r the classified failure.
func (a *Adapter) call(ctx context.Context, sid, proto, method string, params any, key string) (msg *rpcMessage, status int, h http.Header, r dispatch.Result, ok bool) {
	id := a.nextID.Add(1)
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err != nil {
		return nil, 0, nil, dispatch.Result{Outcome: dispatch.Terminal, NotSent: true, Reason: ReasonBadPayload,
			Err: errors.New("mcp: cannot encode the request")}, false
	}
	req, err := dispatch.NewRequest(ctx, http.MethodPost, a.cfg.URL, body)
	if err != nil {
		return nil, 0, nil, dispatch.Result{Outcome: dispatch.Terminal, NotSent: true, Err: errors.New("mcp: cannot build the request")}, false
	}
	req.Header.Set("Content-Type", "application/json")
	a.headers(req, sid, proto, key)
	var tr dispatch.SendTracker
	req = req.WithContext(tr.Trace(ctx))
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, 0, nil, dispatch.ClassifyTransportError(ctx, err, tr.MaybeSent()), false
	}
	defer resp.Body.Close()
	status, h = resp.StatusCode, resp.Header
	if resp.StatusCode == http.StatusNotFound && sid != "" {
		// The server expired the session before acting on the request.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		a.expire(sid)
		return nil, status, h, dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Status: status,
			Reason: ReasonSessionExpired, Err: errors.New("mcp: the server expired the session (404); a new one is initialised")}, false
	}
	if resp.StatusCode/100 != 2 {
		b, _, _ := dispatch.ReadBody(resp.Body, 4096)
		r := httpResult(resp, b)
		if method == "initialize" && (resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed) {
			r.Reason = ReasonProtocol
			r.Err = fmt.Errorf("%w (is the url an MCP Streamable HTTP endpoint?)", r.Err)
		}
		return nil, status, h, r, false
	}
	ambiguous := func(reason string, err error) dispatch.Result {
		return dispatch.Result{Outcome: dispatch.Ambiguous, Status: status, Reason: reason, Err: err}
	}
	ct := strings.ToLower(h.Get("Content-Type"))
	switch {
	case strings.HasPrefix(ct, "text/event-stream"):
		m, err := a.readSSE(resp.Body, id)
		if err != nil {
			if errors.Is(err, errTooLarge) {
				return nil, status, h, dispatch.Result{Outcome: dispatch.Terminal, Status: status, Reason: ReasonTooLarge, Err: err}, false
			}
			if ctx.Err() != nil || !errors.Is(err, errProtocol) {
				r := dispatch.ClassifyTransportError(ctx, err, true)
				return nil, status, h, r, false
			}
			return nil, status, h, ambiguous(ReasonProtocol, err), false
		}
		return m, status, h, dispatch.Result{}, true
	case strings.HasPrefix(ct, "application/json"):
		b, truncated, err := dispatch.ReadBody(resp.Body, a.cfg.MessageLimit)
		if err != nil {
			return nil, status, h, dispatch.ClassifyTransportError(ctx, err, true), false
		}
		if truncated {
			return nil, status, h, dispatch.Result{Outcome: dispatch.Terminal, Status: status, Reason: ReasonTooLarge,
				Err: fmt.Errorf("mcp: %s answer exceeds %d bytes: %w", method, a.cfg.MessageLimit, errTooLarge)}, false
		}
		var m rpcMessage
		if err := json.Unmarshal(b, &m); err != nil || (m.Result == nil && m.Error == nil) {
			return nil, status, h, ambiguous(ReasonProtocol, fmt.Errorf("mcp: %s answer is not a JSON-RPC response", method)), false
		}
		return &m, status, h, dispatch.Result{}, true
	default:
		b, _, _ := dispatch.ReadBody(resp.Body, 200)
		err := fmt.Errorf("mcp: %s answered HTTP %d with content type %q, not JSON-RPC (is the url an MCP Streamable HTTP endpoint?): body %q",
			method, status, oneLine(ct), excerpt(b))
		return nil, status, h, ambiguous(ReasonProtocol, err), false
	}
}

var (
	errTooLarge = errors.New("message too large")
	errProtocol = errors.New("protocol error")
)

// readSSE reads events until the response to id. Other messages (progress,
// logs, server requests) are skipped. A stream that ends first is an error;
// it is never resumed, so the call is never re-sent.
func (a *Adapter) readSSE(r io.Reader, id int64) (*rpcMessage, error) {
	br := bufio.NewReaderSize(r, 32<<10)
	var data bytes.Buffer
	want := strconv.FormatInt(id, 10)
	for {
		line, err := readLine(br, a.cfg.MessageLimit)
		if err != nil {
			if err == io.EOF {
				return nil, fmt.Errorf("mcp: the event stream ended before the answer: %w", io.ErrUnexpectedEOF)
			}
			return nil, err
		}
		switch {
		case len(line) == 0:
			if data.Len() > 0 {
				var m rpcMessage
				if json.Unmarshal(data.Bytes(), &m) == nil && string(bytes.TrimSpace(m.ID)) == want && m.Method == "" {
					if m.Result == nil && m.Error == nil {
						return nil, fmt.Errorf("mcp: the answer is not a JSON-RPC response: %w", errProtocol)
					}
					return &m, nil
				}
				data.Reset()
			}
		case bytes.HasPrefix(line, []byte("data:")):
			v := bytes.TrimPrefix(line[5:], []byte(" "))
			if data.Len()+len(v) > a.cfg.MessageLimit {
				return nil, fmt.Errorf("mcp: an event exceeds %d bytes: %w", a.cfg.MessageLimit, errTooLarge)
			}
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.Write(v)
		}
	}
}

// readLine reads one line without its end, at most limit bytes.
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, isPrefix, err := br.ReadLine()
		if err != nil {
			return nil, err
		}
		line = append(line, chunk...)
		if len(line) > limit {
			return nil, fmt.Errorf("mcp: an event line exceeds %d bytes: %w", limit, errTooLarge)
		}
		if !isPrefix {
			return line, nil
		}
	}
}
