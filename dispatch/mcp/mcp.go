package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/drainer-io/drainer/dispatch"
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

	mu    sync.Mutex
	ready bool // negotiated
	cur   conn

	// A start in the background (StartInBackground).
	connecting atomic.Bool                      // rows wait until the server answered and tools/list was read
	missing    atomic.Pointer[map[string]error] // tools the server lacks, read when it connected
	bgMu       sync.Mutex                       // guards stopBG, bgDone (not mu: a negotiation holds that)
	stopBG     context.CancelFunc
	bgDone     chan struct{}
}

// New returns an adapter for cfg; it does not connect (Init, CheckRoutes or
// the first Dispatch does).
func New(cfg Config) (*Adapter, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Adapter{cfg: cfg, client: dispatch.NewHTTPClient(min(cfg.Timeout, 10*time.Second), cfg.Transport)}, nil
}

// Close stops a background start, ends the session (best effort) and
// closes idle connections.
func (a *Adapter) Close(ctx context.Context) error {
	a.bgMu.Lock()
	stop, done := a.stopBG, a.bgDone
	a.stopBG = nil
	a.bgMu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
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
	if validTraceparent(m.Traceparent) {
		meta[MetaTraceparent] = m.Traceparent
	}
	params := map[string]any{"name": m.Tuple.ToolName, "arguments": json.RawMessage(args)}
	msg, status, h, r, ok := a.request(ctx, "tools/call", params, meta, m.Key, m.Tuple.ToolName)
	if !ok {
		return r
	}
	if msg.Error != nil {
		return rpcErrorResult(status, msg.Error)
	}
	return a.toolResult(status, h, msg.Result)
}

// request sends one JSON-RPC request on the current session, negotiating
// one first when there is none, and once more on a new session when the
// server no longer knows the old one. meta (may be nil) is merged into
// params._meta with, on the stateless revision, the revision and the
// client's identity.
func (a *Adapter) request(ctx context.Context, method string, params, meta map[string]any, key, name string) (*rpcMessage, int, http.Header, dispatch.Result, bool) {
	for try := 0; ; try++ {
		c, r, ok := a.ensure(ctx)
		if !ok {
			return nil, 0, nil, r, false
		}
		p := maps.Clone(params)
		if m := a.meta(c, meta); len(m) > 0 {
			p["_meta"] = m
		}
		msg, status, h, r, ok := a.call(ctx, c, method, p, key, name)
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

// validTraceparent reports whether s is a W3C traceparent (version 00 form,
// or a later version's longer one).
func validTraceparent(s string) bool {
	if len(s) < 55 || len(s) > 512 || (len(s) > 55 && s[55] != '-') {
		return false
	}
	for i := range len(s) {
		c := s[i]
		switch {
		case i < 55 && (i == 2 || i == 35 || i == 52):
			if c != '-' {
				return false
			}
		case i < 55:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		case c < 0x21 || c > 0x7e:
			return false
		}
	}
	return true
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

// ensure returns the connection to use, negotiating one when there is none.
// A failure is a Retry that never sent the tool call (NotSent), or Auth.
func (a *Adapter) ensure(ctx context.Context) (conn, dispatch.Result, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ready {
		return a.cur, dispatch.Result{}, true
	}
	if r, ok := a.initLocked(ctx); !ok {
		if r.Outcome != dispatch.Auth {
			r.Outcome = dispatch.Retry
		}
		r.NotSent = true
		if r.Reason == "" || r.Reason == dispatch.ReasonConnection || r.Reason == dispatch.ReasonTimeout {
			r.Reason = ReasonInit
		}
		return conn{}, r, false
	}
	return a.cur, dispatch.Result{}, true
}

// Init negotiates now (startup); its error names what is wrong.
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

// Negotiated returns the protocol revision in use and whether it is the
// stateless one; "" before the first negotiation.
func (a *Adapter) Negotiated() (revision string, stateless bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cur.proto, a.cur.stateless
}

// startupError is the error of a failed startup call: marked
// dispatch.ErrUnavailable when the server could not be reached or answered
// a transient failure (connection, timeout, 408, 429, 5xx), so the daemon
// does not treat the config as wrong.
func startupError(r dispatch.Result) error {
	if transient(r) {
		return dispatch.MarkUnavailable(r.Err)
	}
	return r.Err
}

// transient reports whether r says the server is not reachable (yet), as
// opposed to reachable and not what the config says.
func transient(r dispatch.Result) bool {
	switch {
	case r.Reason == dispatch.ReasonConnect, r.Reason == dispatch.ReasonConnection, r.Reason == dispatch.ReasonTimeout,
		r.Status == http.StatusRequestTimeout, r.Status == http.StatusTooManyRequests, r.Status >= 500:
		return true
	}
	return false
}

// initLocked negotiates the newest revision both sides speak: server/discover
// for the stateless 2026-07-28 first, then the initialize handshake of the
// session-based revisions. It sets a.cur.
func (a *Adapter) initLocked(ctx context.Context) (dispatch.Result, bool) {
	if r, ok, decided := a.discoverLocked(ctx); decided {
		return r, ok
	}
	params := map[string]any{
		"protocolVersion": Revision20251125,
		"capabilities":    map[string]any{},
		"clientInfo":      a.clientInfo(),
	}
	msg, status, h, r, ok := a.call(ctx, conn{}, "initialize", params, "", "")
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
	if res.ProtocolVersion != Revision20250618 && res.ProtocolVersion != Revision20251125 {
		return dispatch.Result{Outcome: dispatch.Retry, Status: status, Reason: ReasonProtocol,
			Err: fmt.Errorf("mcp initialize: the server speaks MCP protocol revision %q; drainer speaks %s",
				oneLine(res.ProtocolVersion), strings.Join(ProtocolVersions, ", "))}, false
	}
	c := conn{session: h.Get("Mcp-Session-Id"), proto: res.ProtocolVersion}
	// notifications/initialized: a notification, answered 202.
	if r, ok := a.notify(ctx, c, "notifications/initialized"); !ok {
		r.Err = fmt.Errorf("mcp notifications/initialized: %w", r.Err)
		return r, false
	}
	a.cur, a.ready = c, true
	return dispatch.Result{}, true
}

// discoverLocked asks for the stateless revision with server/discover.
// decided is false when the server does not offer it (any refusal that is
// not transient or auth): the caller falls back to initialize.
func (a *Adapter) discoverLocked(ctx context.Context) (_ dispatch.Result, ok, decided bool) {
	c := conn{proto: Revision20260728, stateless: true}
	msg, _, _, r, ok := a.call(ctx, c, "server/discover", map[string]any{"_meta": a.meta(c, nil)}, "", "")
	if !ok {
		if r.Outcome == dispatch.Auth || transient(r) {
			r.Err = fmt.Errorf("mcp server/discover: %w", r.Err)
			return r, false, true
		}
		return dispatch.Result{}, false, false
	}
	if msg.Error != nil {
		return dispatch.Result{}, false, false
	}
	var res struct {
		SupportedVersions []string `json:"supportedVersions"`
	}
	if json.Unmarshal(msg.Result, &res) != nil || !slices.Contains(res.SupportedVersions, Revision20260728) {
		return dispatch.Result{}, false, false
	}
	a.cur, a.ready = c, true
	return dispatch.Result{}, true, true
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

// expire forgets connection c if it is still the current one, so that the
// next request negotiates again.
func (a *Adapter) expire(c conn) {
	a.mu.Lock()
	if a.ready && a.cur == c {
		a.ready, a.cur = false, conn{}
	}
	a.mu.Unlock()
}

func (a *Adapter) headers(req *http.Request, c conn, method, name, key string) {
	for k, v := range a.cfg.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("User-Agent", a.cfg.UserAgent)
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
	}
	if c.proto != "" {
		req.Header.Set("Mcp-Protocol-Version", c.proto)
	}
	if c.stateless && method != "" {
		// The standard headers of 2026-07-28, mirroring the body.
		req.Header.Set("Mcp-Method", method)
		if name != "" {
			req.Header.Set("Mcp-Name", name)
		}
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
}

func (a *Adapter) notify(ctx context.Context, c conn, method string) (dispatch.Result, bool) {
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method})
	req, err := dispatch.NewRequest(ctx, http.MethodPost, a.cfg.URL, body)
	if err != nil {
		return dispatch.Result{Outcome: dispatch.Terminal, NotSent: true, Err: errors.New("mcp: cannot build the request")}, false
	}
	req.Header.Set("Content-Type", "application/json")
	a.headers(req, c, method, "", "")
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

// lostConn reports whether a refusal says the server no longer knows c: a
// 404 on a session, a 400 whose error names the session (the reference
// servers' "No valid session ID provided" after a restart), or, on the
// stateless revision, a 400 refusing the revision (the server was replaced
// by one that does not offer it). Such a request never reached a tool.
func lostConn(c conn, status int, body []byte) bool {
	switch {
	case c.session != "" && status == http.StatusNotFound:
		return true
	case c.session != "" && status == http.StatusBadRequest:
		return bytes.Contains(bytes.ToLower(body), []byte("session"))
	case c.stateless && status == http.StatusBadRequest:
		var m rpcMessage
		return json.Unmarshal(body, &m) == nil && m.Error != nil && m.Error.Code == codeUnsupportedProtocolVersion
	}
	return false
}

// sessionLostError is the error of a call refused for its session; plain is
// the answer classified as any other.
type sessionLostError struct{ plain dispatch.Result }

func (e *sessionLostError) Error() string {
	return fmt.Sprintf("mcp: the server no longer knows the session (HTTP %d): %v", e.plain.Status, e.plain.Err)
}

// codeUnsupportedProtocolVersion is the JSON-RPC error of a server that
// does not speak the revision a request names.
const codeUnsupportedProtocolVersion = -32022

// call sends one JSON-RPC request on c and reads its answer, from a JSON
// body or an SSE stream. ok is false with r the classified failure.
func (a *Adapter) call(ctx context.Context, c conn, method string, params any, key, name string) (msg *rpcMessage, status int, h http.Header, r dispatch.Result, ok bool) {
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
	a.headers(req, c, method, name, key)
	var tr dispatch.SendTracker
	req = req.WithContext(tr.Trace(ctx))
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, 0, nil, dispatch.ClassifyTransportError(ctx, err, tr.MaybeSent()), false
	}
	defer resp.Body.Close()
	status, h = resp.StatusCode, resp.Header
	if resp.StatusCode/100 != 2 {
		b, _, _ := dispatch.ReadBody(resp.Body, 4096)
		if lostConn(c, resp.StatusCode, b) {
			// Refused before any tool ran; request negotiates again.
			return nil, status, h, dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Status: status,
				Reason: ReasonSessionExpired, Err: &sessionLostError{plain: httpResult(resp, b)}}, false
		}
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
