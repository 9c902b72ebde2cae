package gateway_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/drainer"
	"github.com/drainer-io/drainer/gateway"
	"github.com/drainer-io/drainer/internal/daemon"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMain sets the tokens the tests' configurations read from the
// environment once, so that the tests can run side by side.
func TestMain(m *testing.M) {
	os.Setenv("GW_TEST_UPSTREAM_TOKEN", upstreamToken)
	os.Setenv("GW_TEST_TOKEN", agentToken)
	dbtest.Main(m)
}

// upstreamToken is what the adapter sends the tool server; agentToken is
// what the agent sends the gateway. The server must never see the latter.
const (
	upstreamToken = "upstream-secret"
	agentToken    = "agent-secret"
)

// toolServer is an MCP server (the official SDK's) whose tools count their
// effects per idempotency key, as a provider honouring the key does.
type toolServer struct {
	url string

	mu       sync.Mutex
	effects  map[string]int // per tool
	byKey    map[string]*sdk.CallToolResult
	requests map[string]int      // per tool, every request
	waiting  map[string]int      // per tool, requests that reached the server's handler (before "slow" waits)
	auth     map[string]int      // Authorization headers seen
	gate     chan struct{}       // "slow" waits on it
	args     map[string][]string // per tool, the arguments of every request, as received
}

func newToolServer(t *testing.T) *toolServer {
	ts, srv := newUnstartedToolServer(t)
	srv.Start()
	ts.url = srv.URL
	return ts
}

// newUnstartedToolServer is newToolServer before its server starts: its
// address takes connections and answers none until srv.Start.
func newUnstartedToolServer(t *testing.T) (*toolServer, *httptest.Server) {
	ts := &toolServer{effects: map[string]int{}, byKey: map[string]*sdk.CallToolResult{}, requests: map[string]int{}, waiting: map[string]int{},
		auth: map[string]int{}, gate: make(chan struct{}), args: map[string][]string{}}
	server := sdk.NewServer(&sdk.Implementation{Name: "tools", Version: "1"}, nil)
	obj := json.RawMessage(`{"type":"object"}`)
	yes := true
	effect := func(name string, result func(n int) *sdk.CallToolResult) sdk.ToolHandler {
		return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			ts.mu.Lock()
			ts.waiting[name]++
			ts.mu.Unlock()
			if name == "slow" {
				select {
				case <-ts.gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			key, _ := req.Params.Meta["io.drainer/idempotency-key"].(string)
			ts.mu.Lock()
			defer ts.mu.Unlock()
			ts.requests[name]++
			ts.auth[req.Extra.Header.Get("Authorization")]++
			ts.args[name] = append(ts.args[name], string(req.Params.Arguments))
			if prev, ok := ts.byKey[key]; ok && key != "" {
				replay := *prev
				replay.Meta = sdk.Meta{"io.drainer/replay": true}
				return &replay, nil
			}
			ts.effects[name]++
			res := result(ts.effects[name])
			if key != "" {
				ts.byKey[key] = res
			}
			return res, nil
		}
	}
	server.AddTool(&sdk.Tool{Name: "charge", Description: "charges a card", InputSchema: obj,
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &yes}},
		effect("charge", func(n int) *sdk.CallToolResult {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("charged #%d", n)}},
				StructuredContent: json.RawMessage(fmt.Sprintf(`{"z":1,"charge":%d,"a":"first"}`, n))}
		}))
	server.AddTool(&sdk.Tool{Name: "refund", InputSchema: obj}, effect("refund", func(n int) *sdk.CallToolResult {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("refunded #%d", n)}}}
	}))
	server.AddTool(&sdk.Tool{Name: "refuse", InputSchema: obj}, effect("refuse", func(n int) *sdk.CallToolResult {
		return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "card declined"}}}
	}))
	server.AddTool(&sdk.Tool{Name: "slow", InputSchema: obj}, effect("slow", func(n int) *sdk.CallToolResult {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("slow #%d", n)}}}
	}))
	server.AddTool(&sdk.Tool{Name: "big", InputSchema: obj}, effect("big", func(n int) *sdk.CallToolResult {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strings.Repeat("x", bigResult)}}}
	}))
	// Tools declaring an outputSchema whose results are too large to
	// record: bigtyped's structuredContent is small, bigdoc's is not.
	server.AddTool(&sdk.Tool{Name: "bigtyped", InputSchema: obj, OutputSchema: json.RawMessage(typedSchema)},
		effect("bigtyped", func(n int) *sdk.CallToolResult {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strings.Repeat("x", bigResult)}},
				StructuredContent: json.RawMessage(fmt.Sprintf(`{"n":%d,"ok":true}`, n))}
		}))
	server.AddTool(&sdk.Tool{Name: "bigdoc", InputSchema: obj, OutputSchema: json.RawMessage(typedSchema)},
		effect("bigdoc", func(n int) *sdk.CallToolResult {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "a large document"}},
				StructuredContent: json.RawMessage(fmt.Sprintf(`{"n":%d,"ok":true,"doc":%q}`, n, strings.Repeat("y", bigResult)))}
		}))
	server.AddTool(&sdk.Tool{Name: "lookup", InputSchema: obj, Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			ts.mu.Lock()
			ts.requests["lookup"]++
			ts.auth[req.Extra.Header.Get("Authorization")]++
			ts.args["lookup"] = append(ts.args["lookup"], string(req.Params.Arguments))
			ts.mu.Unlock()
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "found"}}}, nil
		})
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return server },
		&sdk.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	srv := httptest.NewUnstartedServer(h)
	t.Cleanup(srv.Close)
	ts.url = "http://" + srv.Listener.Addr().String()
	return ts, srv
}

// bigResult is the size of the big tool's text: more than the 1 MiB record limit.
const bigResult = 3 << 19

// typedSchema is the outputSchema of bigtyped and bigdoc.
const typedSchema = `{"type":"object","properties":{"n":{"type":"integer"},"ok":{"type":"boolean"},"doc":{"type":"string"}},"required":["n","ok"]}`

// argsOf is the arguments of every request of tool the server received.
func (ts *toolServer) argsOf(tool string) []string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]string(nil), ts.args[tool]...)
}

func (ts *toolServer) count(m map[string]int, k string) int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return m[k]
}

// gw is a drainer run with the gateway, in this process.
type gw struct {
	url  string
	pool *pgxpool.Pool
	ts   *toolServer
	// startServer starts the tool server of gwSettings.serverLater.
	startServer func()
}

// startGateway runs drainer with its gateway in front of a tool server.
func startGateway(t *testing.T, wait time.Duration) *gw {
	t.Helper()
	return startGatewayWith(t, wait, gwSettings{})
}

// gwSettings change startGateway's config: the lease (default 20s) and the
// tools adapter's timeout (default 10s) and other settings (YAML lines
// indented as its keys).
type gwSettings struct {
	lease, timeout, adapterExtra string
	// serverLater: the tool server answers only once the test starts it
	// (gw.startServer).
	serverLater bool
}

// startGatewayWith is startGateway with settings of its own.
func startGatewayWith(t *testing.T, wait time.Duration, set gwSettings) *gw {
	t.Helper()
	ts, srv := newUnstartedToolServer(t)
	if !set.serverLater {
		srv.Start()
	}
	pool := storetest.NewPool(t)
	cfg := fmt.Sprintf(`workers: 8
lease: %s
adapters:
  tools:
    type: mcp
    url: %s
    timeout: %s
    headers: {Authorization: "Bearer ${env:GW_TEST_UPSTREAM_TOKEN}"}
%s
routes:
  charge: {adapter: tools, class: key_idempotent, compensation: refund}
  refund: {adapter: tools, class: key_idempotent}
  refuse: {adapter: tools, class: key_idempotent}
  slow: {adapter: tools, class: key_idempotent}
  lookup: {adapter: tools, class: naturally_idempotent}
  big: {adapter: tools, class: key_idempotent}
  bigtyped: {adapter: tools, class: key_idempotent}
  bigdoc: {adapter: tools, class: key_idempotent}
gateway:
  token: ${env:GW_TEST_TOKEN}
  wait: %s
  abort_tool: true
`, cmp.Or(set.lease, "20s"), ts.url, cmp.Or(set.timeout, "10s"), set.adapterExtra, wait)
	path := filepath.Join(t.TempDir(), "drainer.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	runDaemon(t, daemon.Options{ConfigPath: path, DatabaseURL: pool.Config().ConnString(), GatewayListener: ln})
	return &gw{url: "http://" + ln.Addr().String() + gateway.Path, pool: pool, ts: ts, startServer: srv.Start}
}

// client connects an MCP client (the official SDK's) to the gateway with
// the given headers.
func (g *gw) client(t *testing.T, headers map[string]string) *sdk.ClientSession {
	t.Helper()
	hc := &http.Client{Transport: testkit.Headers{Set: headers}}
	c := sdk.NewClient(&sdk.Implementation{Name: "agent", Version: "1"}, nil)
	s, err := c.Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: g.url, HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect to the gateway: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func agentHeaders(run string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + agentToken, gateway.HeaderAgentRunID: run}
}

func call(t *testing.T, s *sdk.ClientSession, tool string, args map[string]any, meta sdk.Meta) *sdk.CallToolResult {
	t.Helper()
	res, err := s.CallTool(context.Background(), &sdk.CallToolParams{Name: tool, Arguments: args, Meta: meta})
	if err != nil {
		t.Fatalf("tools/call %s: %v", tool, err)
	}
	return res
}

// settledCall makes a call and, while the answer says its row is still
// pending or in flight (the wait ran out on a slow machine), makes it again:
// the answer about the settled row, whatever the machine's speed.
func settledCall(t *testing.T, s *sdk.ClientSession, tool string, args map[string]any, meta sdk.Meta) *sdk.CallToolResult {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		res := call(t, s, tool, args, meta)
		st := res.Meta[gateway.MetaStatus]
		if st != "pending" && st != "in_flight" {
			return res
		}
		if time.Now().After(deadline) {
			t.Fatalf("tools/call %s: still %v after two minutes", tool, st)
		}
	}
}

// body is a result as the client decoded it, without _meta and resultType,
// as JSON with sorted keys, to compare answers.
func body(t *testing.T, r *sdk.CallToolResult) string {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "_meta")
	delete(m, "resultType")
	b, err = json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRetriesUnderNewRequestIDsHaveOneEffectAndOneAnswer(t *testing.T) {
	t.Parallel()
	g := startGateway(t, 2*time.Minute)
	s := g.client(t, agentHeaders("run-retry"))
	args := map[string]any{"amount": 5, "card": "c1"}
	first := settledCall(t, s, "charge", args, nil)
	if first.IsError {
		t.Fatalf("first call: %s", body(t, first))
	}
	if first.Meta[gateway.MetaReplay] != nil {
		t.Fatalf("the call that created the row is not a replay: %v", first.Meta)
	}
	want := `{"content":[{"text":"charged #1","type":"text"}],"structuredContent":{"a":"first","charge":1,"z":1}}`
	if got := body(t, first); got != want {
		t.Fatalf("answer:\n got %s\nwant %s", got, want)
	}
	// The record keeps the server's answer byte for byte (its key order too).
	var rec string
	if err := g.pool.QueryRow(context.Background(), `SELECT result::text FROM drainer.call_records WHERE key = $1`, first.Meta[gateway.MetaKey]).Scan(&rec); err != nil {
		t.Fatal(err)
	}
	if wantRec := `{"content":[{"type":"text","text":"charged #1"}],"structuredContent":{"z":1,"charge":1,"a":"first"},"isError":false}`; rec != wantRec {
		t.Fatalf("record:\n got %s\nwant %s", rec, wantRec)
	}
	// The same call again, from a new session (the harness reconnected),
	// with the arguments in another order: one effect, the same answer.
	s2 := g.client(t, agentHeaders("run-retry"))
	for i := range 3 {
		again := settledCall(t, s2, "charge", map[string]any{"card": "c1", "amount": 5}, nil)
		if got := body(t, again); got != want {
			t.Fatalf("retry %d answered\n %s\nnot\n %s", i, got, want)
		}
		if again.Meta[gateway.MetaReplay] != true || again.Meta[gateway.MetaKey] != first.Meta[gateway.MetaKey] {
			t.Fatalf("retry %d _meta %v: want replay true and the first call's key %v", i, again.Meta, first.Meta[gateway.MetaKey])
		}
	}
	if n := g.ts.count(g.ts.effects, "charge"); n != 1 {
		t.Fatalf("%d effects upstream, want 1", n)
	}
	// The agent's own credentials never reach the tool server.
	if n := g.ts.count(g.ts.auth, "Bearer "+agentToken); n != 0 {
		t.Fatalf("the tool server saw the agent's Authorization %d times", n)
	}
	if n := g.ts.count(g.ts.auth, "Bearer "+upstreamToken); n == 0 {
		t.Fatal("the tool server never saw the adapter's credentials")
	}
	// A deliberate second identical call names its own step.
	other := settledCall(t, s, "charge", args, sdk.Meta{gateway.MetaStepID: "second-charge"})
	if other.IsError || other.Meta[gateway.MetaReplay] != nil || g.ts.count(g.ts.effects, "charge") != 2 {
		t.Fatalf("a call with its own step_id: %s %v, effects %d", body(t, other), other.Meta, g.ts.count(g.ts.effects, "charge"))
	}

	// A result too large to record: the call that waited for it gets it
	// whole; a later retry is told it was not kept, and nothing is sent again.
	sb := g.client(t, agentHeaders("run-big"))
	big := call(t, sb, "big", nil, nil) // waits up to the gateway's wait (a minute)
	if big.IsError || len(big.Content) != 1 || len(big.Content[0].(*sdk.TextContent).Text) != bigResult {
		t.Fatalf("big result: isError %v, %d blocks: %.300s", big.IsError, len(big.Content), body(t, big))
	}
	// The first call's row may have been sent more than once with its key
	// (an attempt that outlived the adapter's timeout on a loaded machine
	// is retried); the retry below sends nothing.
	sent := g.ts.count(g.ts.requests, "big")
	notice := settledCall(t, sb, "big", nil, nil)
	if notice.IsError || notice.Meta["io.drainer/too_large"] == nil || notice.Meta[gateway.MetaReplay] != true ||
		!strings.Contains(notice.Content[0].(*sdk.TextContent).Text, "more than drainer keeps") {
		t.Fatalf("retry of a big result: %v %v", notice.Meta, notice.Content)
	}
	if n := g.ts.count(g.ts.requests, "big"); n != sent || n == 0 {
		t.Fatalf("big reached the server %d times, %d before the retry: the retry was sent again", n, sent)
	}
}

func TestConcurrentIdenticalCallsHaveOneEffect(t *testing.T) {
	t.Parallel()
	g := startGateway(t, 2*time.Minute)
	const n = 50
	answers := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		s := g.client(t, agentHeaders("run-concurrent"))
		wg.Go(func() {
			res, err := s.CallTool(context.Background(), &sdk.CallToolParams{Name: "charge", Arguments: map[string]any{"amount": 7}})
			if err != nil {
				errs[i] = err
				return
			}
			answers[i] = body(t, res)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i, a := range answers {
		if a != answers[0] {
			t.Fatalf("answer %d differs:\n%s\n%s", i, a, answers[0])
		}
	}
	if e, r := g.ts.count(g.ts.effects, "charge"), g.ts.count(g.ts.requests, "charge"); e != 1 || r != 1 {
		t.Fatalf("%d effects and %d requests upstream, want 1 and 1", e, r)
	}
}

// TestConflictsAmongConcurrentCallsHarmNoOther: calls recorded together
// (the recorder writes the calls that arrive at once in one transaction)
// are answered each on its own: calls that conflict with a recorded call
// are refused, naming its key, and every other call gets its own answer
// with one effect; nothing of a refused call is sent.
func TestConflictsAmongConcurrentCallsHarmNoOther(t *testing.T) {
	t.Parallel()
	g := startGateway(t, 2*time.Minute)
	pay := sdk.Meta{gateway.MetaStepID: "pay"}
	first := settledCall(t, g.client(t, agentHeaders("run-mixed")), "charge", map[string]any{"amount": 1}, pay)
	const distinct, conflicting = 32, 8
	errs := make([]error, distinct+conflicting)
	answers := make([]*sdk.CallToolResult, distinct)
	sessions := make([]*sdk.ClientSession, distinct+conflicting)
	for i := range sessions {
		sessions[i] = g.client(t, agentHeaders("run-mixed"))
	}
	var wg sync.WaitGroup
	// Started interleaved, a conflicting call every fifth, so that batches
	// hold both.
	for n := range distinct + conflicting {
		i := n/5 + n%5*((distinct+conflicting)/5) // 0, 8, 16, 24, 32 (conflicting), 1, 9, ...
		s := sessions[i]
		wg.Go(func() {
			if i >= distinct {
				_, errs[i] = s.CallTool(context.Background(), &sdk.CallToolParams{Name: "charge", Arguments: map[string]any{"amount": 2}, Meta: pay})
				return
			}
			answers[i], errs[i] = s.CallTool(context.Background(), &sdk.CallToolParams{Name: "charge",
				Arguments: map[string]any{"amount": 10 + i}, Meta: sdk.Meta{gateway.MetaStepID: fmt.Sprintf("step-%d", i)}})
		})
	}
	wg.Wait()
	seen := map[string]int{}
	for i := range distinct {
		if errs[i] != nil || answers[i].IsError {
			t.Errorf("call %d: %v %v; want its answer", i, answers[i], errs[i])
			continue
		}
		b := body(t, answers[i])
		if j, ok := seen[b]; ok {
			t.Errorf("calls %d and %d got the same answer %s; want each its own effect's", j, i, b)
		}
		seen[b] = i
	}
	for i := distinct; i < distinct+conflicting; i++ {
		var rpcErr *jsonrpc.Error
		if !errors.As(errs[i], &rpcErr) || rpcErr.Code != jsonrpc.CodeInvalidParams || !containsKey(rpcErr.Message, first.Meta) {
			t.Errorf("conflicting call %d: %v; want -32602 naming %v", i, errs[i], first.Meta[gateway.MetaKey])
		}
	}
	if e, r := g.ts.count(g.ts.effects, "charge"), g.ts.count(g.ts.requests, "charge"); e != 1+distinct || r != 1+distinct {
		t.Errorf("%d effects and %d requests upstream, want %d and %d", e, r, 1+distinct, 1+distinct)
	}
}

// TestArgumentsOverThePayloadLimit: arguments over the payload limit
// (1 MiB) but within the request's bound are -32602, the same call refused
// for good, not an internal error inviting the agent to call again;
// nothing recorded or sent. The wait is long: the database's refusal of
// 1 MiB, not the call's deadline, must decide, however loaded the machine.
func TestArgumentsOverThePayloadLimit(t *testing.T) {
	t.Parallel()
	g := startGateway(t, 30*time.Second)
	s := g.client(t, agentHeaders("run-big"))
	big := strings.Repeat("x", 1<<20+100)
	_, err := s.CallTool(context.Background(), &sdk.CallToolParams{Name: "charge", Arguments: map[string]any{"note": big},
		Meta: sdk.Meta{gateway.MetaStepID: "big"}})
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInvalidParams || !strings.Contains(rpcErr.Message, "more than the limit") ||
		strings.Contains(rpcErr.Message, "call again") {
		t.Fatalf("arguments over the payload limit: %v; want -32602 saying so, without inviting a retry", err)
	}
	if n := g.ts.count(g.ts.requests, "charge"); n != 0 {
		t.Fatalf("%d requests upstream after a call over the payload limit, want none", n)
	}
}

func TestConflictTimeoutPassthroughAndRefusals(t *testing.T) {
	t.Parallel()
	g := startGateway(t, time.Second)
	s := g.client(t, agentHeaders("run-misc"))

	// The same tuple with other arguments: -32602 naming the key; nothing sent.
	step := sdk.Meta{gateway.MetaStepID: "pay"}
	first := settledCall(t, s, "charge", map[string]any{"amount": 1}, step)
	_, err := s.CallTool(context.Background(), &sdk.CallToolParams{Name: "charge", Arguments: map[string]any{"amount": 2}, Meta: step})
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInvalidParams || !containsKey(rpcErr.Message, first.Meta) {
		t.Fatalf("conflict: %v; want -32602 naming %v", err, first.Meta[gateway.MetaKey])
	}
	if n := g.ts.count(g.ts.requests, "charge"); n != 1 {
		t.Fatalf("%d requests upstream after a conflict, want 1", n)
	}

	// Not settled within wait: isError with the row's status; the retry
	// after it settled gets the result.
	slow := call(t, s, "slow", map[string]any{"x": 1}, nil)
	if st := slow.Meta[gateway.MetaStatus]; !slow.IsError || (st != "in_flight" && st != "pending") {
		t.Fatalf("timeout answer: %s %v", body(t, slow), slow.Meta)
	}
	close(g.ts.gate)
	var later *sdk.CallToolResult
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		if later = call(t, s, "slow", map[string]any{"x": 1}, nil); !later.IsError {
			break
		}
	}
	if later.IsError || body(t, later) != `{"content":[{"text":"slow #1","type":"text"}]}` || later.Meta[gateway.MetaReplay] != true {
		t.Fatalf("after the timeout: %s %v", body(t, later), later.Meta)
	}

	// A tool answering isError: the row failed, the answer is the tool's, as recorded.
	refused := settledCall(t, s, "refuse", map[string]any{"card": "x"}, nil)
	again := settledCall(t, s, "refuse", map[string]any{"card": "x"}, nil)
	if !refused.IsError || body(t, refused) != `{"content":[{"text":"card declined","type":"text"}],"isError":true}` || body(t, again) != body(t, refused) {
		t.Fatalf("isError answers: %s then %s", body(t, refused), body(t, again))
	}
	if n := g.ts.count(g.ts.requests, "refuse"); n != 1 {
		t.Fatalf("refuse reached the server %d times", n)
	}

	// Read-only and naturally idempotent: straight through, unrecorded.
	for range 2 {
		if r := call(t, s, "lookup", nil, nil); r.IsError {
			t.Fatalf("lookup: %s", body(t, r))
		}
	}
	var rows int
	if err := g.pool.QueryRow(context.Background(), `SELECT count(*) FROM drainer.outbox WHERE tool_name = 'lookup'`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if n := g.ts.count(g.ts.requests, "lookup"); n != 2 || rows != 0 {
		t.Fatalf("lookup: %d requests upstream and %d rows; want 2 and 0", n, rows)
	}

	// No run named: -32602 naming both places.
	anon := g.client(t, map[string]string{"Authorization": "Bearer " + agentToken})
	_, err = anon.CallTool(context.Background(), &sdk.CallToolParams{Name: "charge", Arguments: map[string]any{"amount": 9}})
	if !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("a call naming no run: %v", err)
	}

	// The scheme's name in any case (RFC 9110): the token is what counts.
	lower := g.client(t, map[string]string{"Authorization": "bearer " + agentToken, gateway.HeaderAgentRunID: "run-misc"})
	if r := call(t, lower, "lookup", nil, nil); r.IsError {
		t.Fatalf("lookup with the scheme written bearer: %s", body(t, r))
	}

	// Without the token: 401, nothing recorded.
	resp, err := http.Post(g.url, "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %d", resp.StatusCode)
	}
}

// TestPassthroughObeysPausesAndTheAdapterGate: a read-only call passed
// straight through reaches its server only as a row of its route would:
// not while an operator pauses the adapter (drainer pause), and not past
// the adapter's max_concurrency; refused, it is answered isError, saying
// why, and nothing is sent.
func TestPassthroughObeysPausesAndTheAdapterGate(t *testing.T) {
	t.Parallel()
	// The recorded call that holds the adapter's slot below may take as
	// long as the machine needs: its attempt ends only when the test lets it.
	g := startGatewayWith(t, 2*time.Minute, gwSettings{lease: "10m", timeout: "5m", adapterExtra: "    max_concurrency: 1"})
	s := g.client(t, agentHeaders("run-gated"))
	ctx := context.Background()
	st, err := store.New("drainer")
	if err != nil {
		t.Fatal(err)
	}
	lookup := func() *sdk.CallToolResult { return call(t, s, "lookup", map[string]any{"q": "a"}, nil) }
	if r := lookup(); r.IsError {
		t.Fatalf("lookup before any pause: %s", body(t, r))
	}

	// Paused: every replica reads the pauses within seconds; from the
	// first answer saying so, nothing more reaches the server.
	if _, err := st.InsertPause(ctx, g.pool, "adapter", "tools", "test", "maintenance"); err != nil {
		t.Fatal(err)
	}
	var r *sdk.CallToolResult
	for deadline := time.Now().Add(time.Minute); ; {
		if r = lookup(); r.IsError {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("lookup still sent a minute after its adapter was paused")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if txt := text(r); !strings.Contains(txt, "was not sent") || !strings.Contains(txt, "paused by an operator") {
		t.Fatalf("answer while paused: %q", txt)
	}
	sent := g.ts.count(g.ts.requests, "lookup")
	for range 3 {
		if r := lookup(); !r.IsError {
			t.Fatalf("lookup answered while its adapter is paused: %s", body(t, r))
		}
	}
	if n := g.ts.count(g.ts.requests, "lookup"); n != sent {
		t.Fatalf("%d lookups reached the server while its adapter was paused", n-sent)
	}
	if _, err := st.DeletePause(ctx, g.pool, "adapter", "tools"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); lookup().IsError; {
		if time.Now().After(deadline) {
			t.Fatal("lookup still refused a minute after its adapter was resumed")
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The adapter's one slot is held by a recorded call its server holds:
	// a read-only call waits for it, then is refused, unsent.
	slow := make(chan *sdk.CallToolResult, 1)
	go func() {
		res, _ := s.CallTool(ctx, &sdk.CallToolParams{Name: "slow", Arguments: map[string]any{"x": 1}})
		slow <- res
	}()
	for deadline := time.Now().Add(time.Minute); g.ts.count(g.ts.waiting, "slow") == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the slow call did not reach its server within a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
	sent = g.ts.count(g.ts.requests, "lookup")
	if r := lookup(); !r.IsError || !strings.Contains(text(r), "max_concurrency") {
		t.Fatalf("lookup while the adapter's one slot is taken: %s", body(t, r))
	}
	if n := g.ts.count(g.ts.requests, "lookup"); n != sent {
		t.Fatal("a lookup reached the server past the adapter's max_concurrency")
	}
	close(g.ts.gate)
	if r := <-slow; r == nil || r.IsError {
		t.Fatalf("the slow call: %v", r)
	}
	if r := lookup(); r.IsError {
		t.Fatalf("lookup once the slot is free: %s", body(t, r))
	}
}

// text is the text of a result's content blocks.
func text(r *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func containsKey(msg string, meta sdk.Meta) bool {
	k, _ := meta[gateway.MetaKey].(string)
	return k != "" && strings.Contains(msg, k)
}

func TestAbortRunCompensatesCompletedSteps(t *testing.T) {
	t.Parallel()
	g := startGateway(t, 30*time.Second)
	s := g.client(t, agentHeaders("run-abort"))
	if r := settledCall(t, s, "charge", map[string]any{"amount": 3}, nil); r.IsError {
		t.Fatalf("charge: %s", body(t, r))
	}
	if r := call(t, s, gateway.AbortToolName, map[string]any{"reason": "wrong card"}, nil); r.IsError {
		t.Fatalf("abort: %s", body(t, r))
	}
	deadline := time.Now().Add(time.Minute)
	for g.ts.count(g.ts.effects, "refund") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the charge was not compensated within a minute of the abort")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The forward row ends compensated once its refund succeeded.
	for {
		var status string
		if err := g.pool.QueryRow(context.Background(), `SELECT status FROM drainer.outbox WHERE tool_name = 'charge' AND kind = 'forward'`).Scan(&status); err != nil {
			t.Fatal(err)
		}
		if status == "compensated" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the charge row is %s, not compensated, a minute after the abort", status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runDaemon runs drainer with opts (metrics on a free port, a 10 s
// shutdown) until t ends, once it started.
func runDaemon(t *testing.T, opts daemon.Options) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	done := make(chan error, 1)
	opts.MetricsAddr, opts.ShutdownTimeout = "127.0.0.1:0", 10*time.Second
	opts.Started = func(*drainer.Engine) { close(started) }
	go func() { done <- daemon.Run(ctx, opts) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("drainer run: %v", err)
		}
	})
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("drainer run: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("drainer did not start within a minute")
	}
}

// TestToolOfAServerNotAnsweringYet: a routed tool whose server did not
// answer at startup is not listed until it answers, and a call of it
// meanwhile is refused with 503 and Retry-After, saying that the server
// has not answered and nothing was recorded or sent; not as a tool nobody
// routed. Once the server answers, the same call goes through.
func TestToolOfAServerNotAnsweringYet(t *testing.T) {
	t.Parallel()
	g := startGatewayWith(t, 10*time.Second, gwSettings{serverLater: true, timeout: "1s"})
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge","arguments":{"amount":1},"_meta":{"io.drainer/step_id":"early"}}}`
	req, _ := http.NewRequest(http.MethodPost, g.url, strings.NewReader(body))
	for k, v := range agentHeaders("run-early") {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(string(raw), "charge is routed to the mcp adapter tools, whose server has not answered yet") ||
		!strings.Contains(string(raw), `"id":7`) {
		t.Fatalf("a call while its server has not answered: %d (Retry-After %q) %s; want 503 saying so", resp.StatusCode, resp.Header.Get("Retry-After"), raw)
	}
	var rows int
	if err := g.pool.QueryRow(context.Background(), `SELECT count(*) FROM drainer.outbox`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("%d rows recorded (%v) by a call refused before its server answered", rows, err)
	}
	g.startServer()
	s := g.client(t, agentHeaders("run-early"))
	var res *sdk.CallToolResult
	testkit.WaitFor(t, time.Minute, "the tool listed once its server answers", func() (bool, string) {
		res, err = s.CallTool(context.Background(), &sdk.CallToolParams{Name: "charge", Arguments: map[string]any{"amount": 1},
			Meta: sdk.Meta{gateway.MetaStepID: "early"}})
		return err == nil && !res.IsError, fmt.Sprint(err)
	})
	if n := g.ts.count(g.ts.effects, "charge"); n != 1 {
		t.Fatalf("charge took effect %d times, want 1", n)
	}
}
