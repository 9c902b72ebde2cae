package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/drainer-io/drainer/config"
)

// TestBuildMCP: Build reads tools/list; a route naming a tool the server lacks
// is an error naming the tool and the adapter; a contradicting class is a warning.
func TestBuildMCP(t *testing.T) {
	server := sdk.NewServer(&sdk.Implementation{Name: "tools", Version: "1"}, nil)
	server.AddTool(&sdk.Tool{Name: "lookup", InputSchema: json.RawMessage(`{"type":"object"}`),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{}, nil
		})
	srv := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return server },
		&sdk.StreamableHTTPOptions{JSONResponse: true}))
	defer srv.Close()
	defer func() {
		for ss := range server.Sessions() {
			_ = ss.Close()
		}
	}()
	yaml := func(routes string) *config.Config {
		t.Helper()
		cfg, err := config.Parse("c.yaml", []byte(`lease: 1m
adapters:
  tools_server:
    type: mcp
    url: `+srv.URL+`
    headers: {Authorization: "Bearer ${env:TOOLS_TOKEN}"}
routes:
`+routes), config.LoadOptions{LookupEnv: func(string) (string, bool) { return "t0ken", true }})
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	var logs bytes.Buffer
	opts := Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))}

	reg, err := Build(context.Background(), yaml("  lookup: {adapter: tools_server, class: non_idempotent}\n"), opts)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	_ = reg.Close(context.Background())
	if !strings.Contains(logs.String(), "route=lookup class=non_idempotent") {
		t.Errorf("no contradiction warning in:\n%s", logs.String())
	}

	_, err = Build(context.Background(), yaml("  lookup: {adapter: tools_server}\n  send_invoice: {adapter: tools_server}\n"), opts)
	if err == nil || !strings.Contains(err.Error(), `"send_invoice"`) || !strings.Contains(err.Error(), "tools_server") {
		t.Fatalf("Build error = %v, want one naming send_invoice and tools_server", err)
	}
}
