package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/drainer-io/drainer/dispatch/dispatchtest"
	"github.com/drainer-io/drainer/dispatch/mcp"
)

const testSecret = "mcp-secret-token-7f3a"

// toolServer is an MCP server built with the SDK, behind a middleware that
// counts tools/call requests and produces faults. Its "charge" tool has an
// idempotent effect keyed by the _meta idempotency key.
type toolServer struct {
	srv     *httptest.Server
	mcp     http.Handler // the SDK's handler, behind the middleware
	server  *sdk.Server
	release chan struct{}
	opts    serverOpts

	mu        sync.Mutex
	calls     int               // tools/call POSTs seen by the middleware
	headerKey []string          // Idempotency-Key header of each tools/call
	effects   map[string]int    // key → effects
	runs      map[string]int    // key → times the charge tool ran
	tuples    map[string]string // key → _meta tuple as JSON
	posts     []seenPost        // every POST, in order
	faults    []func(w http.ResponseWriter, r *http.Request, body []byte) bool
}

// serverOpts shape the SDK server: stateless (2026-07-28), the revisions
// it offers (nil: the SDK's), event-stream answers instead of JSON.
type serverOpts struct {
	stateless bool
	versions  []string
	sse       bool
}

// seenPost is one POST the middleware saw.
type seenPost struct {
	method, session, proto, mcpMethod, mcpName string
	meta                                       map[string]any
}

func boolPtr(b bool) *bool { return &b }

func newToolServer(t *testing.T) *toolServer { return newToolServerTB(t) }

func newToolServerTB(t testing.TB) *toolServer { return newToolServerOpts(t, serverOpts{}) }

func newToolServerOpts(t testing.TB, o serverOpts) *toolServer {
	ts := &toolServer{release: make(chan struct{}), effects: map[string]int{}, runs: map[string]int{},
		tuples: map[string]string{}, opts: o}
	ts.restart()
	ts.srv = httptest.NewServer(http.HandlerFunc(ts.serve))
	t.Cleanup(ts.srv.Close)
	t.Cleanup(func() { close(ts.release) })
	t.Cleanup(func() { // sessions the adapter forgot (expired ones) end here
		ts.mu.Lock()
		server := ts.server
		ts.mu.Unlock()
		for ss := range server.Sessions() {
			_ = ss.Close()
		}
	})
	return ts
}

// restart replaces the SDK server and handler with new ones, as a restarted
// process would be: every session is forgotten; effects are kept (the
// tool's own store).
func (ts *toolServer) restart() {
	server := sdk.NewServer(&sdk.Implementation{Name: "tools", Version: "1"},
		&sdk.ServerOptions{SupportedProtocolVersions: ts.opts.versions})
	obj := json.RawMessage(`{"type":"object"}`)
	charge := func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		key, _ := req.Params.Meta[mcp.MetaKey].(string)
		tuple, _ := json.Marshal(req.Params.Meta[mcp.MetaTuple])
		ts.mu.Lock()
		ts.runs[key]++
		replay := ts.effects[key] > 0
		if !replay {
			ts.effects[key] = 1
		}
		ts.tuples[key] = string(tuple)
		ts.mu.Unlock()
		var meta sdk.Meta
		if replay {
			meta = sdk.Meta{mcp.MetaReplay: true}
		}
		return &sdk.CallToolResult{
			Meta:              meta,
			Content:           []sdk.Content{&sdk.TextContent{Text: "charged"}},
			StructuredContent: map[string]any{"charged": true, "key": key},
		}, nil
	}
	for _, name := range []string{"charge", dispatchtest.Tool} {
		server.AddTool(&sdk.Tool{Name: name, InputSchema: obj,
			Annotations: &sdk.ToolAnnotations{DestructiveHint: boolPtr(true)}}, charge)
	}
	server.AddTool(&sdk.Tool{Name: "lookup", InputSchema: obj,
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "found it"}}}, nil
		})
	server.AddTool(&sdk.Tool{Name: "refuse", InputSchema: obj},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "card declined"}}}, nil
		})
	server.AddTool(&sdk.Tool{Name: "big", InputSchema: obj},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strings.Repeat("x", 10<<20)}}}, nil
		})
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return server },
		&sdk.StreamableHTTPOptions{JSONResponse: !ts.opts.sse, Stateless: ts.opts.stateless})
	ts.mu.Lock()
	old := ts.server
	ts.mcp, ts.server = h, server
	ts.mu.Unlock()
	if old != nil {
		for ss := range old.Sessions() {
			_ = ss.Close()
		}
	}
}

func (ts *toolServer) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+testSecret {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var rpc struct {
		Method string `json:"method"`
		Params struct {
			Meta map[string]any `json:"_meta"`
		} `json:"params"`
	}
	_ = json.Unmarshal(body, &rpc)
	ts.mu.Lock()
	h := ts.mcp
	if r.Method == http.MethodPost {
		ts.posts = append(ts.posts, seenPost{method: rpc.Method, session: r.Header.Get("Mcp-Session-Id"),
			proto: r.Header.Get("Mcp-Protocol-Version"), mcpMethod: r.Header.Get("Mcp-Method"),
			mcpName: r.Header.Get("Mcp-Name"), meta: rpc.Params.Meta})
	}
	ts.mu.Unlock()
	if bytes.Contains(body, []byte(`"tools/call"`)) {
		ts.mu.Lock()
		ts.calls++
		ts.headerKey = append(ts.headerKey, r.Header.Get("Idempotency-Key"))
		var fault func(http.ResponseWriter, *http.Request, []byte) bool
		if len(ts.faults) > 0 {
			fault, ts.faults = ts.faults[0], ts.faults[1:]
		}
		ts.mu.Unlock()
		if fault != nil && fault(w, r, body) {
			return
		}
	}
	h.ServeHTTP(w, r)
}

func (ts *toolServer) Posts() []seenPost {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]seenPost(nil), ts.posts...)
}

func (ts *toolServer) Runs(key string) int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.runs[key]
}

func (ts *toolServer) inject(f func(w http.ResponseWriter, r *http.Request, body []byte) bool) {
	ts.mu.Lock()
	ts.faults = append(ts.faults, f)
	ts.mu.Unlock()
}

func (ts *toolServer) Calls() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.calls
}

func (ts *toolServer) Effects(_ *testing.T, key string) int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.effects[key]
}

func (ts *toolServer) Inject(f dispatchtest.Fault, n int) bool {
	for range n {
		switch f {
		case dispatchtest.FaultTransient:
			ts.inject(func(w http.ResponseWriter, _ *http.Request, _ []byte) bool {
				w.Header().Set("Retry-After", "1")
				http.Error(w, "try again", http.StatusServiceUnavailable)
				return true
			})
		case dispatchtest.FaultTerminal:
			ts.inject(func(w http.ResponseWriter, r *http.Request, body []byte) bool {
				// Rename the tool to one the server lacks: -32602.
				nb := bytes.Replace(body, []byte(`"name":"`), []byte(`"name":"no_such_`), 1)
				r.Body = io.NopCloser(bytes.NewReader(nb))
				r.ContentLength = int64(len(nb))
				return false
			})
		case dispatchtest.FaultHang:
			ts.inject(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
				select {
				case <-r.Context().Done():
				case <-ts.release:
				}
				return true
			})
		default:
			return false
		}
	}
	return true
}

func newAdapter(t *testing.T, url string) *mcp.Adapter { return newAdapterTB(t, url) }

func newAdapterTB(t testing.TB, url string) *mcp.Adapter {
	t.Helper()
	a, err := mcp.New(mcp.Config{URL: url, Headers: map[string]string{"Authorization": "Bearer " + testSecret}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	return a
}
