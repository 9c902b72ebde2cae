package mcp_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
	"github.com/drainer-io/drainer/dispatch/mcp"
	"github.com/drainer-io/drainer/tooling/testkit"
)

const testTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func traced(tool, payload string) *dispatch.Message {
	m := dispatchtest.NewMessage(tool, payload)
	m.Traceparent = testTraceparent
	return m
}

// TestNegotiateOnly20250618: a server that offers only 2025-06-18 gets
// 2025-06-18, in a session.
func TestNegotiateOnly20250618(t *testing.T) {
	ts := newToolServerOpts(t, serverOpts{versions: []string{mcp.Revision20250618}})
	a := newAdapter(t, ts.srv.URL)
	m := traced("charge", `{"amount":2}`)
	wantOutcome(t, a.Dispatch(context.Background(), m), dispatch.Success)
	if rev, stateless := a.Negotiated(); rev != mcp.Revision20250618 || stateless {
		t.Fatalf("negotiated %q stateless %v, want 2025-06-18 with a session", rev, stateless)
	}
	for _, p := range ts.Posts() {
		if p.method == "tools/call" {
			if p.session == "" || p.proto != mcp.Revision20250618 {
				t.Errorf("tools/call: session %q, Mcp-Protocol-Version %q", p.session, p.proto)
			}
			wantDrainerMeta(t, p.meta, m)
		}
	}
}

// TestNegotiateStatefulSDK: the SDK's stateful server offers 2026-07-28
// only to stateless servers; the adapter settles on 2025-11-25, in a session.
func TestNegotiateStatefulSDK(t *testing.T) {
	ts := newToolServerOpts(t, serverOpts{sse: true})
	a := newAdapter(t, ts.srv.URL)
	m := traced("charge", `{"amount":2}`)
	wantOutcome(t, a.Dispatch(context.Background(), m), dispatch.Success)
	if rev, stateless := a.Negotiated(); rev != mcp.Revision20251125 || stateless {
		t.Fatalf("negotiated %q stateless %v, want 2025-11-25 with a session", rev, stateless)
	}
	methods := map[string]int{}
	for _, p := range ts.Posts() {
		methods[p.method]++
		if p.method == "tools/call" {
			wantDrainerMeta(t, p.meta, m)
		}
	}
	if methods["initialize"] != 1 {
		t.Errorf("POSTs by method %v: want one initialize", methods)
	}
}

// TestNegotiateStateless: a stateless 2026-07-28 server gets no initialize
// and no session; every request carries the revision and the client's
// identity in _meta (and the standard headers); tools/call carries the
// key, the tuple and the traceparent too.
func TestNegotiateStateless(t *testing.T) {
	ts := newToolServerOpts(t, serverOpts{stateless: true})
	a, err := mcp.New(mcp.Config{URL: ts.srv.URL, ClientVersion: "1.2.3",
		Headers: map[string]string{"Authorization": "Bearer " + testSecret}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	if err := a.CheckRoutes(context.Background(), "tools", []mcp.Route{{Tool: "charge", Class: "key_idempotent"}}, nil); err != nil {
		t.Fatal(err)
	}
	m := traced("charge", `{"amount":2}`)
	r := a.Dispatch(context.Background(), m)
	wantOutcome(t, r, dispatch.Success)
	if rev, stateless := a.Negotiated(); rev != mcp.Revision20260728 || !stateless {
		t.Fatalf("negotiated %q stateless %v, want 2026-07-28 stateless", rev, stateless)
	}
	if ts.Runs(m.Key) != 1 {
		t.Errorf("the tool ran %d times", ts.Runs(m.Key))
	}
	methods := map[string]int{}
	for _, p := range ts.Posts() {
		methods[p.method]++
		if p.session != "" {
			t.Errorf("%s carried Mcp-Session-Id %q", p.method, p.session)
		}
		if p.proto != mcp.Revision20260728 || p.mcpMethod != p.method {
			t.Errorf("%s: Mcp-Protocol-Version %q Mcp-Method %q", p.method, p.proto, p.mcpMethod)
		}
		if v, _ := p.meta["io.modelcontextprotocol/protocolVersion"].(string); v != mcp.Revision20260728 {
			t.Errorf("%s: _meta protocolVersion %v", p.method, p.meta["io.modelcontextprotocol/protocolVersion"])
		}
		info, _ := p.meta["io.modelcontextprotocol/clientInfo"].(map[string]any)
		if info["name"] != "drainer" || info["version"] != "1.2.3" {
			t.Errorf("%s: _meta clientInfo %v", p.method, p.meta["io.modelcontextprotocol/clientInfo"])
		}
		if p.method == "tools/call" {
			if p.mcpName != "charge" {
				t.Errorf("tools/call: Mcp-Name %q", p.mcpName)
			}
			wantDrainerMeta(t, p.meta, m)
		}
	}
	if methods["initialize"] != 0 || methods["notifications/initialized"] != 0 || methods["tools/call"] != 1 || methods["tools/list"] != 1 {
		t.Errorf("POSTs by method %v: want no initialize, one tools/list, one tools/call", methods)
	}
}

// wantDrainerMeta checks the drainer fields of a tools/call _meta.
func wantDrainerMeta(t *testing.T, meta map[string]any, m *dispatch.Message) {
	t.Helper()
	tuple, _ := meta["io.drainer/tuple"].(map[string]any)
	if meta["io.drainer/idempotency-key"] != m.Key || meta["traceparent"] != m.Traceparent ||
		tuple["agent_run_id"] != m.Tuple.AgentRunID || tuple["step_id"] != m.Tuple.StepID ||
		tuple["tool_name"] != m.Tuple.ToolName || tuple["business_scope"] != m.Tuple.BusinessScope {
		t.Errorf("tools/call _meta = %v, want key %s, tuple %+v and traceparent %s", meta, m.Key, m.Tuple, m.Traceparent)
	}
}

// TestServerRestart: the server restarts between calls, in both modes; each
// row's call succeeds in one Dispatch, its tool ran once.
func TestServerRestart(t *testing.T) {
	for name, o := range map[string]serverOpts{"stateful": {}, "stateful-sse": {sse: true}, "stateless": {stateless: true}} {
		t.Run(name, func(t *testing.T) {
			ts := newToolServerOpts(t, o)
			a := newAdapter(t, ts.srv.URL)
			for i := range 4 {
				m := dispatchtest.NewMessage("charge", `{"i":1}`)
				wantOutcome(t, a.Dispatch(context.Background(), m), dispatch.Success)
				if n := ts.Runs(m.Key); n != 1 {
					t.Errorf("call %d: the tool ran %d times", i, n)
				}
				ts.restart()
			}
		})
	}
}

// TestStartInBackground: a server unreachable at startup: its rows wait
// (Retry, not sent) while the adapter connects in the background; once the
// server answers, tools/list is read, a route naming a tool the server
// lacks keeps its rows waiting with an error naming the tool, and the
// others drain.
func TestStartInBackground(t *testing.T) {
	ts := newToolServer(t)
	var down atomic.Bool
	down.Store(true)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				c.Close()
			}
			return
		}
		ts.serve(w, r)
	}))
	defer front.Close()
	a := newAdapter(t, front.URL)
	routes := []mcp.Route{{Tool: "charge", Class: "key_idempotent"}, {Tool: "absent", Class: "key_idempotent"}}
	err := a.CheckRoutes(context.Background(), "tools", routes, nil)
	if !errors.Is(err, dispatch.ErrUnavailable) {
		t.Fatalf("CheckRoutes on a server that hangs up: %v, want ErrUnavailable", err)
	}
	var logs testkit.Buffer
	a.StartInBackground("tools", routes, slog.New(slog.NewTextHandler(&logs, nil)))
	m := dispatchtest.NewMessage("charge", `{}`)
	r := a.Dispatch(context.Background(), m)
	wantOutcome(t, r, dispatch.Retry)
	if !r.NotSent || r.Reason != mcp.ReasonNotReady || r.RetryAfter <= 0 || a.Ready() {
		t.Errorf("while down: notSent %v reason %s retryAfter %v ready %v", r.NotSent, r.Reason, r.RetryAfter, a.Ready())
	}
	down.Store(false)
	deadline := time.Now().Add(time.Minute)
	for !a.Ready() {
		if time.Now().After(deadline) {
			t.Fatalf("not ready a minute after the server came up; logs:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	wantOutcome(t, a.Dispatch(context.Background(), m), dispatch.Success)
	if ts.Runs(m.Key) != 1 {
		t.Errorf("the tool ran %d times", ts.Runs(m.Key))
	}
	r = a.Dispatch(context.Background(), dispatchtest.NewMessage("absent", `{}`))
	wantOutcome(t, r, dispatch.Retry)
	if !r.NotSent || r.Reason != mcp.ReasonNotReady || !strings.Contains(r.Err.Error(), `no tool "absent"`) {
		t.Errorf("missing tool: notSent %v reason %s err %v", r.NotSent, r.Reason, r.Err)
	}
	if out := logs.String(); !strings.Contains(out, `no tool \"absent\"`) || !strings.Contains(out, "connected") {
		t.Errorf("logs lack the missing tool or the connection:\n%s", out)
	}
}
