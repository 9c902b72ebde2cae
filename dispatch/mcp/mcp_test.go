package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
	"github.com/drainer-io/drainer/dispatch/mcp"
)

func TestConformance(t *testing.T) {
	dispatchtest.Run(t, func(t *testing.T) (dispatch.Adapter, dispatchtest.Upstream, string) {
		ts := newToolServer(t)
		a, err := mcp.New(mcp.Config{URL: ts.srv.URL, Timeout: 5 * time.Second,
			Headers: map[string]string{"Authorization": "Bearer " + testSecret}})
		if err != nil {
			t.Fatal(err)
		}
		return a, ts, testSecret
	})
}

func dispatchTool(t *testing.T, a *mcp.Adapter, tool, payload string) (*dispatch.Message, dispatch.Result) {
	t.Helper()
	m := dispatchtest.NewMessage(tool, payload)
	return m, a.Dispatch(context.Background(), m)
}

func wantOutcome(t *testing.T, r dispatch.Result, want dispatch.Outcome) {
	t.Helper()
	if r.Outcome != want {
		t.Fatalf("outcome = %s (reason %s, err %v), want %s", r.Outcome, r.Reason, r.Err, want)
	}
}

func TestSuccessStructuredContent(t *testing.T) {
	ts := newToolServer(t)
	a := newAdapter(t, ts.srv.URL)
	m, r := dispatchTool(t, a, "charge", `{"amount":5}`)
	wantOutcome(t, r, dispatch.Success)
	var got map[string]any
	if err := json.Unmarshal(r.Response, &got); err != nil || got["key"] != m.Key || got["charged"] != true {
		t.Fatalf("response = %s", r.Response)
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if len(ts.headerKey) != 1 || ts.headerKey[0] != m.Key {
		t.Errorf("Idempotency-Key headers = %v, want [%s]", ts.headerKey, m.Key)
	}
	var tuple map[string]string
	if err := json.Unmarshal([]byte(ts.tuples[m.Key]), &tuple); err != nil ||
		tuple["agent_run_id"] != m.Tuple.AgentRunID || tuple["step_id"] != m.Tuple.StepID ||
		tuple["tool_name"] != "charge" || tuple["business_scope"] != m.Tuple.BusinessScope {
		t.Errorf("_meta tuple = %s", ts.tuples[m.Key])
	}
}

func TestSuccessContentOnly(t *testing.T) {
	ts := newToolServer(t)
	a := newAdapter(t, ts.srv.URL)
	_, r := dispatchTool(t, a, "lookup", `{}`)
	wantOutcome(t, r, dispatch.Success)
	if want := `{"content":[{"type":"text","text":"found it"}]}`; string(r.Response) != want {
		t.Errorf("response = %s, want %s", r.Response, want)
	}
}

func TestToolError(t *testing.T) {
	ts := newToolServer(t)
	a := newAdapter(t, ts.srv.URL)
	_, r := dispatchTool(t, a, "refuse", `{}`)
	wantOutcome(t, r, dispatch.Terminal)
	if r.Reason != mcp.ReasonToolError || !strings.Contains(r.Err.Error(), "card declined") {
		t.Errorf("reason %s err %v", r.Reason, r.Err)
	}
}

func TestInvalidParams(t *testing.T) {
	ts := newToolServer(t)
	a := newAdapter(t, ts.srv.URL)
	_, r := dispatchTool(t, a, "no_such_tool", `{}`)
	wantOutcome(t, r, dispatch.Terminal)
	if r.Reason != mcp.ReasonInvalidRequest {
		t.Errorf("reason %s err %v", r.Reason, r.Err)
	}
}

func TestPayloadNotObject(t *testing.T) {
	ts := newToolServer(t)
	a := newAdapter(t, ts.srv.URL)
	_, r := dispatchTool(t, a, "charge", `[1,2]`)
	wantOutcome(t, r, dispatch.Terminal)
	if !r.NotSent || ts.Calls() != 0 || !strings.Contains(r.Err.Error(), "JSON object") {
		t.Errorf("notSent %v calls %d err %v", r.NotSent, ts.Calls(), r.Err)
	}
}

// TestSessionExpired: a 404 on the session (the server forgot it) is
// re-established within the attempt and the call sent again with the same
// key: one Dispatch, one effect.
func TestSessionExpired(t *testing.T) {
	ts := newToolServer(t)
	a := newAdapter(t, ts.srv.URL)
	_, r := dispatchTool(t, a, "lookup", `{}`)
	wantOutcome(t, r, dispatch.Success)
	ts.inject(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if r.Header.Get("Mcp-Session-Id") == "" {
			t.Error("tools/call without a session id")
		}
		http.Error(w, "session not found", http.StatusNotFound)
		return true
	})
	m := dispatchtest.NewMessage("charge", `{"amount":1}`)
	r = a.Dispatch(context.Background(), m)
	wantOutcome(t, r, dispatch.Success)
	if n := ts.Runs(m.Key); n != 1 {
		t.Errorf("the tool ran %d times, want 1", n)
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if k := ts.headerKey; len(k) != 3 || k[1] != m.Key || k[2] != m.Key {
		t.Errorf("Idempotency-Key headers = %v", k)
	}
}

// TestSessionClosedByServer: the SDK server ends the session; it answers the
// next call 404, and the adapter initialises a new session and sends the
// call again, in the same attempt.
func TestSessionClosedByServer(t *testing.T) {
	ts := newToolServer(t)
	a := newAdapter(t, ts.srv.URL)
	_, r := dispatchTool(t, a, "lookup", `{}`)
	wantOutcome(t, r, dispatch.Success)
	for ss := range ts.server.Sessions() {
		_ = ss.Close()
	}
	m := dispatchtest.NewMessage("charge", `{"amount":1}`)
	r = a.Dispatch(context.Background(), m)
	wantOutcome(t, r, dispatch.Success)
	if n := ts.Runs(m.Key); n != 1 {
		t.Errorf("the tool ran %d times, want 1", n)
	}
}

// TestSessionLost400: the reference servers answer a call on a session they
// do not know (after a restart) 400 "No valid session ID provided". That is
// not a terminal 4xx: the session is re-established and the call sent again
// with the same key, in the same attempt.
func TestSessionLost400(t *testing.T) {
	ts := newToolServer(t)
	a := newAdapter(t, ts.srv.URL)
	_, r := dispatchTool(t, a, "lookup", `{}`)
	wantOutcome(t, r, dispatch.Success)
	ts.inject(func(w http.ResponseWriter, _ *http.Request, _ []byte) bool {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"}}`)
		return true
	})
	m := dispatchtest.NewMessage("charge", `{"amount":1}`)
	r = a.Dispatch(context.Background(), m)
	wantOutcome(t, r, dispatch.Success)
	if n := ts.Runs(m.Key); n != 1 {
		t.Errorf("the tool ran %d times, want 1", n)
	}
	var calls []seenPost
	for _, p := range ts.Posts() {
		if p.method == "tools/call" {
			calls = append(calls, p)
		}
	}
	if len(calls) != 3 || calls[1].session == calls[2].session || calls[2].session == "" {
		t.Errorf("tools/call sessions %+v: want the refused call and the resend on a new session", calls)
	}
}

// TestSessionLostTwice: a server that refuses the new session too is not
// one that lost a session: after one resend the answer is classified as
// what it says (a 400: terminal), never a loop of free resends.
func TestSessionLostTwice(t *testing.T) {
	ts := newToolServer(t)
	a := newAdapter(t, ts.srv.URL)
	for range 2 {
		ts.inject(func(w http.ResponseWriter, _ *http.Request, _ []byte) bool {
			http.Error(w, "Bad Request: No valid session ID provided", http.StatusBadRequest)
			return true
		})
	}
	m, r := dispatchTool(t, a, "charge", `{}`)
	wantOutcome(t, r, dispatch.Terminal)
	if r.Status != http.StatusBadRequest || !strings.Contains(r.Err.Error(), "refused again on a new session") ||
		ts.Runs(m.Key) != 0 || ts.Calls() != 2 {
		t.Errorf("status %d err %v runs %d calls %d", r.Status, r.Err, ts.Runs(m.Key), ts.Calls())
	}
}

// TestBadRequestTerminal: a 400 that does not name the session stays a
// terminal 4xx.
func TestBadRequestTerminal(t *testing.T) {
	ts := newToolServer(t)
	a := newAdapter(t, ts.srv.URL)
	ts.inject(func(w http.ResponseWriter, _ *http.Request, _ []byte) bool {
		http.Error(w, "Bad Request: arguments do not match the schema", http.StatusBadRequest)
		return true
	})
	_, r := dispatchTool(t, a, "charge", `{}`)
	wantOutcome(t, r, dispatch.Terminal)
	if ts.Calls() != 1 {
		t.Errorf("calls %d, want 1", ts.Calls())
	}
}

func TestRetryAfter(t *testing.T) {
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusTooManyRequests} {
		ts := newToolServer(t)
		a := newAdapter(t, ts.srv.URL)
		ts.inject(func(w http.ResponseWriter, _ *http.Request, _ []byte) bool {
			w.Header().Set("Retry-After", "7")
			http.Error(w, "slow down", status)
			return true
		})
		_, r := dispatchTool(t, a, "charge", `{}`)
		wantOutcome(t, r, dispatch.Retry)
		if r.RetryAfter != 7*time.Second || r.Status != status {
			t.Errorf("%d: retry after %s status %d", status, r.RetryAfter, r.Status)
		}
	}
}

func TestAuth(t *testing.T) {
	ts := newToolServer(t)
	a, err := mcp.New(mcp.Config{URL: ts.srv.URL, Headers: map[string]string{"Authorization": "Bearer wrong"}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	_, r := dispatchTool(t, a, "charge", `{}`)
	wantOutcome(t, r, dispatch.Auth)
	if strings.Contains(r.Err.Error(), "wrong") {
		t.Errorf("error leaks the header: %v", r.Err)
	}
}

// TestDroppedAfterEffect: the server commits the effect, then drops the
// connection. Exactly one request reaches it, and the outcome is Ambiguous.
func TestDroppedAfterEffect(t *testing.T) {
	ts := newToolServer(t)
	a := newAdapter(t, ts.srv.URL)
	_, r := dispatchTool(t, a, "lookup", `{}`) // warm the session and a keep-alive connection
	wantOutcome(t, r, dispatch.Success)
	ts.inject(func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		inner := httptest.NewRecorder()
		r.Body = io.NopCloser(bytes.NewReader(body))
		ts.mcp.ServeHTTP(inner, r) // commits the effect
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
		return true
	})
	m := dispatchtest.NewMessage("charge", `{"amount":3}`)
	before := ts.Calls()
	r = a.Dispatch(context.Background(), m)
	wantOutcome(t, r, dispatch.Ambiguous)
	if r.NotSent {
		t.Error("NotSent on a request that reached the server")
	}
	if got := ts.Calls() - before; got != 1 {
		t.Errorf("tools/call seen %d times on the wire, want 1", got)
	}
	if n := ts.Effects(t, m.Key); n != 1 {
		t.Errorf("effects = %d, want 1", n)
	}
}

func TestNotAnMCPServer(t *testing.T) {
	for name, h := range map[string]http.HandlerFunc{
		"html": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			io.WriteString(w, "<html>hello</html>")
		},
		"404": http.NotFound,
	} {
		srv := httptest.NewServer(h)
		a := newAdapter(t, srv.URL)
		err := a.Init(context.Background())
		if err == nil || !strings.Contains(err.Error(), "MCP") {
			t.Errorf("%s: Init error = %v, want one naming MCP", name, err)
		}
		_, r := dispatchTool(t, a, "charge", `{}`)
		if r.Outcome != dispatch.Retry || !r.NotSent {
			t.Errorf("%s: dispatch = %s notSent %v", name, r.Outcome, r.NotSent)
		}
		a.Close(context.Background())
		srv.Close()
	}
}

func TestOldProtocolRevision(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID json.RawMessage `json:"id"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":{"protocolVersion":"2024-11-05","capabilities":{},"serverInfo":{"name":"old","version":"1"}}}`))
	}))
	defer srv.Close()
	a := newAdapter(t, srv.URL)
	err := a.Init(context.Background())
	if err == nil || !strings.Contains(err.Error(), `"2024-11-05"`) || !strings.Contains(err.Error(), mcp.Revision20250618) {
		t.Fatalf("Init error = %v", err)
	}
}

func TestLargeResultTruncated(t *testing.T) {
	ts := newToolServer(t)
	// A 10 MiB answer under -race on a loaded machine can take longer than
	// the default 30 s attempt: the verdict is about truncation, not speed.
	a, err := mcp.New(mcp.Config{URL: ts.srv.URL, Headers: map[string]string{"Authorization": "Bearer " + testSecret}, Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	_, r := dispatchTool(t, a, "big", `{}`)
	wantOutcome(t, r, dispatch.Success)
	if len(r.Response) > dispatch.DefaultResponseLimit+32 || !json.Valid(r.Response) ||
		!strings.Contains(string(r.Response), `"truncated":true`) {
		t.Errorf("response: %d bytes, starts %.80s", len(r.Response), r.Response)
	}
}

func TestSSEAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		switch req.Method {
		case "initialize":
			w.Header().Set("Mcp-Session-Id", "s1")
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}`))
		case "tools/call":
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n")
			io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":"+string(req.ID)+",\"result\":{\"content\":[],\"structuredContent\":{\"ok\":1}}}\n\n")
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	defer srv.Close()
	a := newAdapter(t, srv.URL)
	_, r := dispatchTool(t, a, "x", `{}`)
	wantOutcome(t, r, dispatch.Success)
	if string(r.Response) != `{"ok":1}` {
		t.Errorf("response %s", r.Response)
	}
}

func TestCheckRoutes(t *testing.T) {
	ts := newToolServer(t)
	a := newAdapter(t, ts.srv.URL)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	err := a.CheckRoutes(context.Background(), "tools_server", []mcp.Route{
		{Tool: "charge", Class: "naturally_idempotent"}, // destructive, not idempotent: warning
		{Tool: "lookup", Class: "non_idempotent"},       // read-only: warning
		{Tool: "refuse", Class: "key_idempotent"},
		{Tool: "missing_tool", Class: "key_idempotent"},
	}, log)
	if err == nil || !strings.Contains(err.Error(), `"missing_tool"`) || !strings.Contains(err.Error(), "tools_server") {
		t.Fatalf("CheckRoutes error = %v", err)
	}
	out := logs.String()
	for _, want := range []string{"route=charge class=naturally_idempotent", "route=lookup class=non_idempotent"} {
		if !strings.Contains(out, want) {
			t.Errorf("no warning with %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "route=refuse") {
		t.Errorf("unexpected warning for refuse:\n%s", out)
	}
}
