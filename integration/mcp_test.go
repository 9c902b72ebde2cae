//go:build integration

package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// Wire names of docs/reference.md §5, spelled out here rather than imported, so the
// tests check the contract and not the adapter's own constants.
const (
	mcpMetaKey   = "io.drainer/idempotency-key"
	mcpMetaTuple = "io.drainer/tuple"
)

// mcpPost is one POST the MCP server's front door saw.
type mcpPost struct {
	method    string // JSON-RPC method ("" when the body is not a JSON-RPC request)
	tool      string // params.name of a tools/call
	metaKey   string // params._meta key of a tools/call, as sent
	headerKey string // Idempotency-Key header
	auth      string // Authorization header
	session   string // Mcp-Session-Id header
	status    int    // 503 when the front door refused it, else 0 (passed to the SDK)
	at        time.Time
}

// mcpHandled is one tool call the SDK server handed to a tool handler.
type mcpHandled struct {
	tool  string
	key   string         // _meta[io.drainer/idempotency-key]
	tuple map[string]any // _meta[io.drainer/tuple]
	args  json.RawMessage
}

// mcpToolServer is an MCP server built with the go-sdk, served over
// Streamable HTTP (the SDK's default: answers as event streams) on
// 127.0.0.1, behind a front door that records every request's headers,
// refuses requests without the bearer token (401), and answers 503 with
// Retry-After: 1 to the first tools/call of each key of reserve_seat.
//
// Tools and annotations:
//   - create_ticket (destructiveHint false): structuredContent {ticket_id, title}
//   - lookup_order (readOnlyHint): text content only
//   - reserve_seat (destructiveHint false, idempotentHint): structuredContent {seat, reserved}
//   - send_invoice (destructiveHint true): always isError: true ("card declined")
type mcpToolServer struct {
	srv    *httptest.Server
	server *sdk.Server
	token  string

	mu        sync.Mutex
	requests  int // every HTTP request, any method
	deletes   int // DELETE requests (a client ending its session)
	posts     []mcpPost
	badAuth   []string // "METHOD body-method" of requests refused 401
	handled   []mcpHandled
	refused   map[string]bool // reserve_seat keys already answered 503 once
	closeOnce sync.Once
}

func mcpBool(b bool) *bool { return &b }

func newMCPToolServer(t *testing.T, token string) *mcpToolServer {
	t.Helper()
	ts := &mcpToolServer{token: token, refused: map[string]bool{}}
	server := sdk.NewServer(&sdk.Implementation{Name: "ticket-tools", Version: "1.0.0"}, nil)
	obj := json.RawMessage(`{"type":"object"}`)
	record := func(req *sdk.CallToolRequest) {
		key, _ := req.Params.Meta[mcpMetaKey].(string)
		tuple, _ := req.Params.Meta[mcpMetaTuple].(map[string]any)
		ts.mu.Lock()
		ts.handled = append(ts.handled, mcpHandled{tool: req.Params.Name, key: key, tuple: tuple,
			args: append(json.RawMessage(nil), req.Params.Arguments...)})
		ts.mu.Unlock()
	}
	server.AddTool(&sdk.Tool{Name: "create_ticket", InputSchema: obj,
		Annotations: &sdk.ToolAnnotations{DestructiveHint: mcpBool(false)}},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			record(req)
			var args struct {
				Title string `json:"title"`
			}
			_ = json.Unmarshal(req.Params.Arguments, &args)
			key, _ := req.Params.Meta[mcpMetaKey].(string)
			return &sdk.CallToolResult{
				Content:           []sdk.Content{&sdk.TextContent{Text: "ticket created"}},
				StructuredContent: map[string]any{"ticket_id": mcpTicketID(key), "title": args.Title},
			}, nil
		})
	server.AddTool(&sdk.Tool{Name: "lookup_order", InputSchema: obj,
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			record(req)
			var args struct {
				OrderID int `json:"order_id"`
			}
			_ = json.Unmarshal(req.Params.Arguments, &args)
			return &sdk.CallToolResult{Content: []sdk.Content{
				&sdk.TextContent{Text: fmt.Sprintf("order %d: shipped", args.OrderID)}}}, nil
		})
	server.AddTool(&sdk.Tool{Name: "reserve_seat", InputSchema: obj,
		Annotations: &sdk.ToolAnnotations{DestructiveHint: mcpBool(false), IdempotentHint: true}},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			record(req)
			var args struct {
				Seat string `json:"seat"`
			}
			_ = json.Unmarshal(req.Params.Arguments, &args)
			return &sdk.CallToolResult{
				Content:           []sdk.Content{&sdk.TextContent{Text: "reserved"}},
				StructuredContent: map[string]any{"seat": args.Seat, "reserved": true},
			}, nil
		})
	server.AddTool(&sdk.Tool{Name: "send_invoice", InputSchema: obj,
		Annotations: &sdk.ToolAnnotations{DestructiveHint: mcpBool(true)}},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			record(req)
			return &sdk.CallToolResult{IsError: true,
				Content: []sdk.Content{&sdk.TextContent{Text: "card declined: insufficient funds"}}}, nil
		})
	ts.server = server
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return server }, nil)
	ts.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var rpc struct {
			Method string `json:"method"`
			Params struct {
				Name string         `json:"name"`
				Meta map[string]any `json:"_meta"`
			} `json:"params"`
		}
		_ = json.Unmarshal(body, &rpc)
		ts.mu.Lock()
		ts.requests++
		if r.Header.Get("Authorization") != "Bearer "+ts.token {
			ts.badAuth = append(ts.badAuth, r.Method+" "+rpc.Method)
			ts.mu.Unlock()
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if r.Method != http.MethodPost {
			if r.Method == http.MethodDelete {
				ts.deletes++
			}
			ts.mu.Unlock()
			h.ServeHTTP(w, r)
			return
		}
		p := mcpPost{method: rpc.Method, tool: rpc.Params.Name, headerKey: r.Header.Get("Idempotency-Key"),
			auth: r.Header.Get("Authorization"), session: r.Header.Get("Mcp-Session-Id"), at: time.Now()}
		p.metaKey, _ = rpc.Params.Meta[mcpMetaKey].(string)
		refuse := rpc.Method == "tools/call" && rpc.Params.Name == "reserve_seat" && !ts.refused[p.metaKey]
		if refuse {
			ts.refused[p.metaKey] = true
			p.status = http.StatusServiceUnavailable
		}
		ts.posts = append(ts.posts, p)
		ts.mu.Unlock()
		if refuse {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "overloaded, try again", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.close)
	return ts
}

// close ends the server's sessions (the SDK keeps each until its client
// deletes it) and then the listener.
func (ts *mcpToolServer) close() {
	ts.closeOnce.Do(func() {
		for ss := range ts.server.Sessions() {
			_ = ss.Close()
		}
		ts.srv.Close()
	})
}

func (ts *mcpToolServer) snapshot() (posts []mcpPost, handled []mcpHandled, badAuth []string, requests int) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]mcpPost(nil), ts.posts...), append([]mcpHandled(nil), ts.handled...),
		append([]string(nil), ts.badAuth...), ts.requests
}

// mcpTicketID is the ticket create_ticket makes for a key.
func mcpTicketID(key string) string {
	if len(key) < 16 {
		return "TCK-" + key
	}
	return "TCK-" + key[8:16]
}

// mcpConfig is a config with one mcp adapter tools_server at url, whose
// Authorization header reads TOOLS_TOKEN, and the given routes block.
func mcpConfig(url, routes string) string {
	return fmt.Sprintf(`workers: 4
lease: 40s
unrouted_recheck: 1s
adapters:
  tools_server:
    type: mcp
    url: %s
    timeout: 30s
    headers: {Authorization: "Bearer ${env:TOOLS_TOKEN}"}
routes:
%s`, url, routes)
}

func mcpSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "tools-secret-" + hex.EncodeToString(b)
}

// mcpJSONEqual reports whether two JSON texts hold the same value.
func mcpJSONEqual(t *testing.T, a, b string) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal([]byte(a), &va); err != nil {
		t.Fatalf("not JSON: %q: %v", a, err)
	}
	if err := json.Unmarshal([]byte(b), &vb); err != nil {
		t.Fatalf("not JSON: %q: %v", b, err)
	}
	return reflect.DeepEqual(va, vb)
}

// TestMCPDrain runs `drainer run` against an MCP server built with the SDK:
// intents for four tools, enqueued with `drainer enqueue` and with SQL
// drainer.enqueue, drain as docs/reference.md §5 says. Each tools/call carries the
// row's key in _meta and in the Idempotency-Key header and its tuple in
// _meta; response holds structuredContent, or {"content": [...]} without it;
// isError: true ends the row failed; a 503 with Retry-After is retried with
// the same key no sooner than Retry-After; the bearer token from
// ${env:TOOLS_TOKEN} reaches the server on every request and appears
// nowhere in the daemon's output or the outbox.
func TestMCPDrain(t *testing.T) {
	dbURL, pool := newMigratedDB(t)
	secret := mcpSecret(t)
	ts := newMCPToolServer(t, secret)

	cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", mcpConfig(ts.srv.URL+"/mcp", `  create_ticket:
    adapter: tools_server
    class: key_idempotent
  lookup_order:
    adapter: tools_server
    class: naturally_idempotent
  reserve_seat:
    adapter: tools_server
    class: key_idempotent
    max_attempts: 5
    backoff: {base: 50ms, cap: 200ms}
  send_invoice:                  # the tool says destructive and not idempotent
    adapter: tools_server
    class: naturally_idempotent
    max_attempts: 5
`))
	check := runCLI(t, nil, "check", "--config", cfgPath)
	if check.code != 0 {
		t.Fatalf("drainer check: %s", check)
	}
	t.Setenv("TOOLS_TOKEN", secret) // inherited by the daemon (childEnv)

	d := startDaemon(t, "drainer-mcp", "--config", cfgPath, "--database-url", dbURL,
		"--log-level", "debug", "--shutdown-timeout", "20s")
	d.waitReady(2 * time.Minute)

	// The intents: each its own run, so the failing one aborts no other.
	type intent struct {
		tuple   idemkey.Tuple
		payload string
	}
	intents := []intent{
		{idemkey.Tuple{AgentRunID: "run-a", StepID: "s1", ToolName: "create_ticket", BusinessScope: "acme"}, `{"title":"Disk full"}`},
		{idemkey.Tuple{AgentRunID: "run-b", StepID: "s1", ToolName: "create_ticket", BusinessScope: "globex"}, `{"title":"VPN down"}`},
		{idemkey.Tuple{AgentRunID: "run-c", StepID: "s2", ToolName: "lookup_order", BusinessScope: ""}, `{"order_id":42}`},
		{idemkey.Tuple{AgentRunID: "run-d", StepID: "s3", ToolName: "reserve_seat", BusinessScope: "flight-7"}, `{"seat":"12A"}`},
		{idemkey.Tuple{AgentRunID: "run-e", StepID: "s4", ToolName: "send_invoice", BusinessScope: "acme"}, `{"amount_cents":1200}`},
	}
	keys := make([]string, len(intents))
	for i, in := range intents {
		want := in.tuple.Key()
		if i%2 == 0 { // the CLI, as a user at a shell
			res := runCLI(t, nil, "enqueue", "--database-url", dbURL, "--run", in.tuple.AgentRunID, "--step", in.tuple.StepID,
				"--tool", in.tuple.ToolName, "--scope", in.tuple.BusinessScope, "--payload", in.payload)
			if res.code != 0 || strings.TrimSpace(res.stdout) != want+" created" {
				t.Fatalf("drainer enqueue %s: %s\nwant stdout %q", in.tuple.ToolName, res, want+" created")
			}
		} else { // SQL, as an agent in its own transaction
			var key string
			var created bool
			err := pool.QueryRow(context.Background(), `SELECT key, created FROM drainer.enqueue($1, $2, $3, $4, $5::jsonb)`,
				in.tuple.AgentRunID, in.tuple.StepID, in.tuple.ToolName, in.tuple.BusinessScope, in.payload).Scan(&key, &created)
			if err != nil || key != want || !created {
				t.Fatalf("drainer.enqueue %s: key %q created %v err %v; want key %s created", in.tuple.ToolName, key, created, err, want)
			}
		}
		keys[i] = want
	}
	ticketA, ticketB, lookup, seat, invoice := keys[0], keys[1], keys[2], keys[3], keys[4]

	testkit.WaitFor(t, 2*time.Minute, "no row pending or in_flight", func() (bool, string) {
		d.requireRunning()
		if _, _, bad, _ := ts.snapshot(); len(bad) > 0 {
			t.Fatalf("the MCP server refused requests without the bearer token: %v", bad)
		}
		c := statusCounts(t, pool)
		return c["pending"] == 0 && c["in_flight"] == 0, fmt.Sprint(c)
	})
	if c := statusCounts(t, pool); c["succeeded"] != 4 || c["failed"] != 1 || len(c) != 2 {
		t.Errorf("status counts %v, want 4 succeeded and 1 failed", c)
	}

	posts, handled, badAuth, requests := ts.snapshot()
	rows := map[string]outboxRow{}
	for _, k := range keys {
		rows[k] = readRow(t, pool, k)
	}

	// Every request reached the server with the token from TOOLS_TOKEN.
	if len(badAuth) != 0 {
		t.Errorf("requests without the bearer token: %v", badAuth)
	}
	methods := map[string]int{}
	for _, p := range posts {
		methods[p.method]++
		if p.auth != "Bearer "+secret {
			t.Errorf("%s POST carried Authorization %q, want the configured bearer token", p.method, p.auth)
		}
	}
	t.Logf("MCP server: %d requests, POSTs by method %v", requests, methods)
	if methods["initialize"] < 1 || methods["tools/list"] < 1 {
		t.Errorf("POSTs by method %v: want initialize and tools/list at startup", methods)
	}

	// Each tools/call POST: Idempotency-Key header = _meta key = a row's key,
	// inside a session.
	callsByKey := map[string][]mcpPost{}
	for _, p := range posts {
		if p.method != "tools/call" {
			continue
		}
		if p.headerKey != p.metaKey {
			t.Errorf("tools/call %s: Idempotency-Key header %q, _meta key %q: want the same", p.tool, p.headerKey, p.metaKey)
		}
		if p.session == "" {
			t.Errorf("tools/call %s (key %s) carried no Mcp-Session-Id", p.tool, p.metaKey)
		}
		callsByKey[p.metaKey] = append(callsByKey[p.metaKey], p)
	}
	// The tool handlers saw each row's key and tuple in _meta and its payload
	// as arguments, once per row.
	handledByKey := map[string][]mcpHandled{}
	for _, h := range handled {
		handledByKey[h.key] = append(handledByKey[h.key], h)
	}
	if len(handledByKey) != len(keys) {
		t.Errorf("tool handlers saw %d distinct _meta keys, want %d (one per row)", len(handledByKey), len(keys))
	}
	for i, k := range keys {
		in := intents[i]
		hs := handledByKey[k]
		if len(hs) != 1 {
			t.Errorf("%s (key %s): the tool handler ran %d times, want 1", in.tuple.ToolName, k, len(hs))
			continue
		}
		h := hs[0]
		if h.tool != in.tuple.ToolName {
			t.Errorf("key %s: tools/call name %q, want %q", k, h.tool, in.tuple.ToolName)
		}
		wantTuple := map[string]any{"agent_run_id": in.tuple.AgentRunID, "step_id": in.tuple.StepID,
			"tool_name": in.tuple.ToolName, "business_scope": in.tuple.BusinessScope}
		if !reflect.DeepEqual(h.tuple, wantTuple) {
			t.Errorf("key %s: _meta tuple %v, want %v", k, h.tuple, wantTuple)
		}
		if !mcpJSONEqual(t, string(h.args), in.payload) {
			t.Errorf("key %s: arguments %s, want the payload %s", k, h.args, in.payload)
		}
	}
	for _, k := range []string{ticketA, ticketB, lookup, invoice} {
		if n := len(callsByKey[k]); n != 1 {
			t.Errorf("key %s: %d tools/call POSTs, want 1", k, n)
		}
	}

	// response: structuredContent, or {"content": [...]} without it.
	for _, c := range []struct{ key, want string }{
		{ticketA, fmt.Sprintf(`{"ticket_id":%q,"title":"Disk full"}`, mcpTicketID(ticketA))},
		{ticketB, fmt.Sprintf(`{"ticket_id":%q,"title":"VPN down"}`, mcpTicketID(ticketB))},
		{lookup, `{"content":[{"type":"text","text":"order 42: shipped"}]}`},
		{seat, `{"seat":"12A","reserved":true}`},
	} {
		r := rows[c.key]
		switch {
		case r.Status != "succeeded":
			t.Errorf("key %s: status %s (last_error %v), want succeeded", c.key, r.Status, mcpDeref(r.LastError))
		case r.Response == nil:
			t.Errorf("key %s: succeeded with a null response", c.key)
		case !mcpJSONEqual(t, *r.Response, c.want):
			t.Errorf("key %s: response %s, want %s", c.key, *r.Response, c.want)
		}
	}
	for _, k := range []string{ticketA, ticketB, lookup, invoice} {
		if a := rows[k].Attempts; a != 1 {
			t.Errorf("key %s: attempts %d, want 1", k, a)
		}
	}

	// isError: true is terminal: failed at the first attempt, last_error set.
	if r := rows[invoice]; r.Status != "failed" || r.LastError == nil ||
		!strings.Contains(*r.LastError, "isError") || !strings.Contains(*r.LastError, "card declined") {
		t.Errorf("send_invoice row: status %s, last_error %q; want failed with the tool's error text", r.Status, mcpDeref(r.LastError))
	} else {
		t.Logf("send_invoice row: failed, last_error %q", *r.LastError)
	}

	// 503 + Retry-After: 1 on the first call: retried with the same key, no
	// sooner than Retry-After, then succeeded; the tool ran once.
	seatCalls := callsByKey[seat]
	if len(seatCalls) != 2 {
		t.Errorf("reserve_seat: %d tools/call POSTs, want 2 (503, then success)", len(seatCalls))
	} else {
		if seatCalls[0].status != http.StatusServiceUnavailable || seatCalls[1].status != 0 {
			t.Errorf("reserve_seat POST statuses %d, %d: want 503 then passed to the server", seatCalls[0].status, seatCalls[1].status)
		}
		for i, p := range seatCalls {
			if p.headerKey != seat || p.metaKey != seat {
				t.Errorf("reserve_seat POST %d: header key %q, _meta key %q; want the row's key %s on every attempt", i+1, p.headerKey, p.metaKey, seat)
			}
		}
		// The server's own clock at both POSTs; the floor holds however slow
		// the machine is (the retry can come later, never sooner).
		if gap := seatCalls[1].at.Sub(seatCalls[0].at); gap < 950*time.Millisecond {
			t.Errorf("reserve_seat retried %v after the 503, sooner than its Retry-After: 1", gap)
		} else {
			t.Logf("reserve_seat retried %v after the 503 (Retry-After: 1)", gap.Round(time.Millisecond))
		}
	}
	if a := rows[seat].Attempts; a != 2 {
		t.Errorf("reserve_seat row: attempts %d, want 2", a)
	}

	// The contradicting route is logged as a warning naming route, class and
	// tool; the consistent ones are not.
	out := d.stderr.String()
	var warned []string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "contradicts the tool's annotations") {
			warned = append(warned, line)
		}
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "route=send_invoice") ||
		!strings.Contains(warned[0], "class=naturally_idempotent") || !strings.Contains(warned[0], "tool=send_invoice") ||
		strings.Count(warned[0], "adapter=") != 1 || !strings.Contains(warned[0], "adapter=tools_server") {
		t.Errorf("annotation warnings = %q; want exactly one, naming route send_invoice, its class, the tool and its adapter once", warned)
	}

	// Metrics: the retry and the terminal answer are counted for the adapter.
	if v := d.metric("drainer_dispatch_total", `adapter="tools_server"`, `outcome="retry"`); v < 1 {
		t.Errorf(`drainer_dispatch_total{adapter="tools_server",outcome="retry"} = %v, want >= 1`, v)
	}
	if v := d.metric("drainer_dispatch_total", `adapter="tools_server"`, `outcome="terminal"`); v != 1 {
		t.Errorf(`drainer_dispatch_total{adapter="tools_server",outcome="terminal"} = %v, want 1`, v)
	}

	// SIGTERM: clean exit, nothing in_flight.
	d.signal(syscall.SIGTERM)
	if code := d.exitCode(time.Minute); code != 0 {
		t.Errorf("drainer run exited %d after SIGTERM, want 0", code)
	}
	ts.mu.Lock()
	t.Logf("MCP server saw %d DELETE (session end) after SIGTERM", ts.deletes)
	ts.mu.Unlock()

	// The secret never leaves the header: not in the daemon's output (debug
	// level), not in check's, not in any outbox row.
	for name, text := range map[string]string{"drainer run output": d.stderr.String(),
		"drainer check output": check.stdout + check.stderr} {
		if strings.Contains(text, secret) {
			t.Errorf("%s contains the TOOLS_TOKEN secret", name)
		}
	}
	var leaked int
	if err := pool.QueryRow(context.Background(),
		`SELECT count(*) FROM drainer.outbox o WHERE strpos(o::text, $1) > 0`, secret).Scan(&leaked); err != nil {
		t.Fatal(err)
	}
	if leaked != 0 {
		t.Errorf("%d outbox rows contain the TOOLS_TOKEN secret", leaked)
	}
}

func mcpDeref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// TestMCPStartupMissingTool: a route naming a tool the MCP server does not
// list. `drainer check` accepts the config without any request to the server
// (and with TOOLS_TOKEN unset); `drainer run` reads tools/list, sends no
// tools/call, and exits 2 (a build error of an adapter is a config error,
// internal/daemon.ConfigError) with an error at the adapter's line naming
// the tool and the adapter.
func TestMCPStartupMissingTool(t *testing.T) {
	dbURL, pool := newMigratedDB(t)
	secret := mcpSecret(t)
	ts := newMCPToolServer(t, secret)
	cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", mcpConfig(ts.srv.URL+"/mcp", `  create_ticket: {adapter: tools_server, class: key_idempotent}
  archive_ticket: {adapter: tools_server, class: key_idempotent}
`))

	// check: no network, no secrets needed.
	t.Setenv("TOOLS_TOKEN", "")
	os.Unsetenv("TOOLS_TOKEN") // t.Setenv restores the outer value at the end
	check := runCLI(t, nil, "check", "--config", cfgPath)
	if check.code != 0 {
		t.Fatalf("drainer check: %s\nwant exit 0: check does not connect to the MCP server", check)
	}
	if !strings.Contains(check.stdout+check.stderr, "TOOLS_TOKEN") {
		t.Errorf("drainer check says nothing of the unset TOOLS_TOKEN: %s", check)
	}
	if _, _, _, n := ts.snapshot(); n != 0 {
		t.Fatalf("drainer check sent %d requests to the MCP server; want none", n)
	}

	// A row for a tool the server does have: it must stay untouched.
	var key string
	if err := pool.QueryRow(context.Background(),
		`SELECT key FROM drainer.enqueue('run-1', 's1', 'create_ticket', 'acme', '{"title":"Disk full"}'::jsonb)`).Scan(&key); err != nil {
		t.Fatal(err)
	}

	t.Setenv("TOOLS_TOKEN", secret)
	d := startDaemon(t, "drainer-mcp-missing-tool", "--config", cfgPath, "--database-url", dbURL)
	code := d.exitCode(2 * time.Minute)
	elapsed := time.Since(d.started)
	out := d.stderr.String()
	t.Logf("drainer run exited %d after %v:\n%s", code, elapsed.Round(time.Millisecond), tail(out, 2000))
	if code != 2 {
		t.Errorf("drainer run exited %d, want 2 (config error)", code)
	}
	line := lineOf(t, cfgPath, "tools_server:")
	wantLoc := fmt.Sprintf("%s:%d: adapters.tools_server:", cfgPath, line)
	if !strings.Contains(out, wantLoc) || !strings.Contains(out, `"archive_ticket"`) ||
		!strings.Contains(out, "adapter tools_server") || strings.Contains(out, `"create_ticket"`) {
		t.Errorf("stderr does not name the missing tool archive_ticket (only it) and the adapter tools_server at %q:\n%s", wantLoc, out)
	}
	if strings.Contains(out, secret) {
		t.Errorf("drainer run output contains the TOOLS_TOKEN secret")
	}
	posts, _, badAuth, _ := ts.snapshot()
	methods := map[string]int{}
	for _, p := range posts {
		methods[p.method]++
	}
	if len(badAuth) != 0 || methods["tools/list"] < 1 || methods["tools/call"] != 0 {
		t.Errorf("MCP server saw POSTs %v, refused %v; want tools/list read with the token and no tools/call", methods, badAuth)
	}
	if r := readRow(t, pool, key); r.Status != "pending" || r.Attempts != 0 {
		t.Errorf("create_ticket row: status %s attempts %d; want pending, 0 (nothing dispatched)", r.Status, r.Attempts)
	}
}

// TestMCPNotAnMCPServer: the adapter url answers 200 text/html (a web
// page, not an MCP endpoint). `drainer run` does not retry at startup: it
// exits 2 after two requests (server/discover for the stateless revision,
// then initialize) with an error at the adapter's line naming the
// adapter and what came back, and nothing is dispatched.
func TestMCPNotAnMCPServer(t *testing.T) {
	dbURL, pool := newMigratedDB(t)
	secret := mcpSecret(t)
	t.Setenv("TOOLS_TOKEN", secret)
	var key string
	if err := pool.QueryRow(context.Background(),
		`SELECT key FROM drainer.enqueue('run-1', 's1', 'create_ticket', 'acme', '{"title":"Disk full"}'::jsonb)`).Scan(&key); err != nil {
		t.Fatal(err)
	}

	run := func(t *testing.T, url string, requests func() int, wantErr ...string) {
		cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", mcpConfig(url, "  create_ticket: {adapter: tools_server, class: key_idempotent}\n"))
		if res := runCLI(t, nil, "check", "--config", cfgPath); res.code != 0 {
			t.Fatalf("drainer check: %s", res)
		}
		if n := requests(); n != 0 {
			t.Fatalf("drainer check sent %d requests; want none", n)
		}
		d := startDaemon(t, "drainer-mcp-"+t.Name(), "--config", cfgPath, "--database-url", dbURL)
		code := d.exitCode(2 * time.Minute)
		out := d.stderr.String()
		t.Logf("drainer run exited %d after %v, %d requests:\n%s", code, time.Since(d.started).Round(time.Millisecond), requests(), tail(out, 2000))
		if code != 2 {
			t.Errorf("drainer run exited %d, want 2", code)
		}
		wantLoc := fmt.Sprintf("%s:%d: adapters.tools_server: mcp initialize:", cfgPath, lineOf(t, cfgPath, "tools_server:"))
		if !strings.Contains(out, wantLoc) {
			t.Errorf("stderr lacks %q:\n%s", wantLoc, out)
		}
		for _, w := range wantErr {
			if !strings.Contains(out, w) {
				t.Errorf("stderr lacks %q:\n%s", w, out)
			}
		}
		if strings.Contains(out, secret) {
			t.Errorf("drainer run output contains the TOOLS_TOKEN secret")
		}
		if n := requests(); n != 2 {
			t.Errorf("the server got %d requests, want 2 (server/discover, then initialize; not retried)", n)
		}
		if r := readRow(t, pool, key); r.Status != "pending" || r.Attempts != 0 {
			t.Errorf("row: status %s attempts %d; want pending, 0", r.Status, r.Attempts)
		}
	}

	t.Run("html", func(t *testing.T) {
		var mu sync.Mutex
		n := 0
		web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			mu.Lock()
			n++
			mu.Unlock()
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = io.WriteString(w, "<!doctype html><html><body><h1>Welcome to nginx!</h1></body></html>")
		}))
		defer web.Close()
		run(t, web.URL+"/mcp", func() int { mu.Lock(); defer mu.Unlock(); return n },
			`initialize answered HTTP 200 with content type "text/html; charset=utf-8", not JSON-RPC`,
			"is the url an MCP Streamable HTTP endpoint?")
	})
}
