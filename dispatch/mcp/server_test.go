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

	mu        sync.Mutex
	calls     int               // tools/call POSTs seen by the middleware
	headerKey []string          // Idempotency-Key header of each tools/call
	effects   map[string]int    // key → effects
	tuples    map[string]string // key → _meta tuple as JSON
	faults    []func(w http.ResponseWriter, r *http.Request, body []byte) bool
}

func boolPtr(b bool) *bool { return &b }

func newToolServer(t *testing.T) *toolServer { return newToolServerTB(t) }

func newToolServerTB(t testing.TB) *toolServer {
	ts := &toolServer{release: make(chan struct{}), effects: map[string]int{}, tuples: map[string]string{}}
	server := sdk.NewServer(&sdk.Implementation{Name: "tools", Version: "1"}, nil)
	obj := json.RawMessage(`{"type":"object"}`)
	charge := func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		key, _ := req.Params.Meta[mcp.MetaKey].(string)
		tuple, _ := json.Marshal(req.Params.Meta[mcp.MetaTuple])
		ts.mu.Lock()
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
		&sdk.StreamableHTTPOptions{JSONResponse: true})
	ts.mcp, ts.server = h, server
	ts.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testSecret {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
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
	}))
	t.Cleanup(ts.srv.Close)
	t.Cleanup(func() { close(ts.release) })
	t.Cleanup(func() { // sessions the adapter forgot (expired ones) end here
		for ss := range server.Sessions() {
			_ = ss.Close()
		}
	})
	return ts
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
