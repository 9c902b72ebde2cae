//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/drainer-io/drainer/tooling/testkit"
)

// The gateway's wire names (docs/reference.md §13), spelled out here so the
// tests check the contract and not the package's own constants.
const (
	gwMetaKey    = "io.drainer/key"
	gwMetaReplay = "io.drainer/replay"
	gwRunHeader  = "X-Agent-Run-Id"
	gwTokenEnv   = "GW_IT_TOKEN"
)

// gwToolServer is the tool server behind the gateway: an MCP server built
// with the go-sdk (stateless Streamable HTTP, JSON answers) on a fixed
// 127.0.0.1 address, which can be stopped and started again there, as a
// new process (a new SDK server) would be. Its tools count their effects
// per idempotency key, as a provider honouring keys does, across restarts:
// a request whose key already took effect is answered with the stored result
// and replay _meta.
//
//   - charge takes effect at once.
//   - hold waits until the gate named by its "gate" argument is released,
//     even when its caller has gone, then takes effect: an effect whose
//     answer may be lost.
type gwToolServer struct {
	addr string

	mu       sync.Mutex
	srv      *http.Server
	refuser  net.Listener
	hangups  int                            // connections the refuser hung up
	effects  map[string]int                 // key → effects
	requests map[string]int                 // key → tools/call the tools handled
	results  map[string]*sdk.CallToolResult // key → the result of its effect
	effectOf map[string]int                 // key → the number of its effect
	total    int                            // effects of every key, numbering the results
	arrived  map[string]int                 // gate → hold calls that reached it
	gates    map[string]chan struct{}
}

func newGWToolServer(t *testing.T) *gwToolServer {
	t.Helper()
	ts := &gwToolServer{addr: "127.0.0.1:0", effects: map[string]int{}, requests: map[string]int{},
		results: map[string]*sdk.CallToolResult{}, effectOf: map[string]int{}, arrived: map[string]int{}, gates: map[string]chan struct{}{}}
	ts.start(t)
	t.Cleanup(func() {
		ts.releaseAll()
		ts.stop()
		ts.endRefusing()
	})
	return ts
}

func (ts *gwToolServer) url() string { return "http://" + ts.addr + "/mcp" }

// start serves a new SDK server on the server's address.
func (ts *gwToolServer) start(t *testing.T) {
	t.Helper()
	var ln net.Listener
	testkit.WaitFor(t, time.Minute, "listening on "+ts.addr, func() (bool, string) {
		var err error
		ln, err = net.Listen("tcp", ts.addr)
		return err == nil, fmt.Sprint(err)
	})
	ts.addr = ln.Addr().String()
	server := sdk.NewServer(&sdk.Implementation{Name: "gateway-tools", Version: "1"}, nil)
	obj := json.RawMessage(`{"type":"object"}`)
	for _, name := range []string{"charge", "hold"} {
		server.AddTool(&sdk.Tool{Name: name, InputSchema: obj, Annotations: &sdk.ToolAnnotations{DestructiveHint: mcpBool(true)}},
			ts.tool(name))
	}
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return server },
		&sdk.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ts.mu.Lock()
	ts.srv = srv
	ts.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

// stop closes the listener and every connection at once; a tool still
// running goes on (its effect happens, its answer is lost).
func (ts *gwToolServer) stop() {
	ts.mu.Lock()
	srv := ts.srv
	ts.srv = nil
	ts.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// refuse takes the address while the server is stopped, hanging up every
// connection at once, and counts them.
func (ts *gwToolServer) refuse(t *testing.T) {
	t.Helper()
	var ln net.Listener
	testkit.WaitFor(t, time.Minute, "refusing on "+ts.addr, func() (bool, string) {
		var err error
		ln, err = net.Listen("tcp", ts.addr)
		return err == nil, fmt.Sprint(err)
	})
	ts.mu.Lock()
	ts.refuser = ln
	ts.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
			ts.mu.Lock()
			ts.hangups++
			ts.mu.Unlock()
		}
	}()
}

func (ts *gwToolServer) endRefusing() {
	ts.mu.Lock()
	ln := ts.refuser
	ts.refuser = nil
	ts.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
}

func (ts *gwToolServer) tool(name string) sdk.ToolHandler {
	return func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		var args map[string]any
		if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
			return nil, err
		}
		if name == "hold" {
			gate, _ := args["gate"].(string)
			ts.mu.Lock()
			ts.arrived[gate]++
			ch := ts.gate(gate)
			ts.mu.Unlock()
			<-ch
		}
		key, _ := req.Params.Meta[mcpMetaKey].(string)
		ts.mu.Lock()
		defer ts.mu.Unlock()
		ts.requests[key]++
		// The server marshals (and may touch) what a handler returns after
		// ts.mu is released: each answer is a result of its own, never
		// the one kept in ts.results.
		if effect, ok := ts.effectOf[key]; ok && key != "" {
			first, _ := ts.results[key].StructuredContent.(map[string]any)["args"].(map[string]any)
			replay := effectResult(name, effect, first)
			replay.Meta = sdk.Meta{"io.drainer/replay": true}
			return replay, nil
		}
		ts.effects[key]++
		ts.total++
		ts.effectOf[key] = ts.total
		ts.results[key] = effectResult(name, ts.total, args)
		return effectResult(name, ts.total, args), nil
	}
}

// effectResult is the result of a tool's effect number n.
func effectResult(name string, n int, args map[string]any) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("%s #%d", name, n)}},
		StructuredContent: map[string]any{"effect": n, "tool": name, "args": args}}
}

// gate returns the gate of name; ts.mu is held.
func (ts *gwToolServer) gate(name string) chan struct{} {
	ch, ok := ts.gates[name]
	if !ok {
		ch = make(chan struct{})
		ts.gates[name] = ch
	}
	return ch
}

func (ts *gwToolServer) release(name string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ch := ts.gate(name)
	select {
	case <-ch:
	default:
		close(ch)
	}
}

func (ts *gwToolServer) releaseAll() {
	ts.mu.Lock()
	names := make([]string, 0, len(ts.gates))
	for name := range ts.gates {
		names = append(names, name)
	}
	ts.mu.Unlock()
	for _, name := range names {
		ts.release(name)
	}
}

// count reads one of the server's counters.
func (ts *gwToolServer) count(f func() int) int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return f()
}

// resultBody is the result the key's effect answered, as gwBody shows it.
func (ts *gwToolServer) resultBody(t *testing.T, key string) string {
	t.Helper()
	ts.mu.Lock()
	res := ts.results[key]
	ts.mu.Unlock()
	if res == nil {
		t.Fatalf("the tool server holds no result for key %s", key)
	}
	return gwBody(t, res)
}

// gwConfig routes charge and hold to the tool server at url, with a gateway
// whose token is read from GW_IT_TOKEN and whose calls wait up to 2m.
func gwConfig(url, lease, timeout string) string {
	return fmt.Sprintf(`workers: 4
lease: %s
adapters:
  tools:
    type: mcp
    url: %s
    timeout: %s
    breaker: {consecutive_failures: 0}
routes:
  charge: {adapter: tools, class: key_idempotent, max_attempts: 100, backoff: {base: 50ms, cap: 500ms}}
  hold: {adapter: tools, class: key_idempotent, max_attempts: 100, backoff: {base: 50ms, cap: 500ms}}
gateway:
  token: ${env:%s}
  wait: 2m
`, lease, url, timeout, gwTokenEnv)
}

// gwSetup is a migrated database, a tool server, a config for it and a
// free gateway address.
type gwSetup struct {
	dbURL, cfgPath, addr, token string
	pool                        *pgxpool.Pool
	ts                          *gwToolServer
}

func newGWSetup(t *testing.T, lease, timeout string) *gwSetup {
	t.Helper()
	dbURL, pool := newMigratedDB(t)
	ts := newGWToolServer(t)
	return &gwSetup{dbURL: dbURL, pool: pool, ts: ts, token: mcpSecret(t),
		cfgPath: writeFile(t, t.TempDir(), "drainer.yaml", gwConfig(ts.url(), lease, timeout)),
		addr:    "127.0.0.1:" + strconv.Itoa(freePort(t))}
}

func (s *gwSetup) url() string { return "http://" + s.addr + "/mcp" }

// start starts `drainer run` with the gateway on the setup's address and
// waits until the gateway lists the tools.
func (s *gwSetup) start(t *testing.T, name string) *daemon {
	t.Helper()
	d := startDaemonEnv(t, name, []string{gwTokenEnv + "=" + s.token},
		"--config", s.cfgPath, "--database-url", s.dbURL, "--gateway-addr", s.addr)
	probe := s.agent(t, "probe")
	testkit.WaitFor(t, 2*time.Minute, name+"'s gateway listing charge and hold", func() (bool, string) {
		d.requireRunning()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		sess, err := probe.connect(ctx)
		if err != nil {
			return false, err.Error()
		}
		defer sess.Close()
		res, err := sess.ListTools(ctx, nil)
		if err != nil {
			return false, err.Error()
		}
		names := map[string]bool{}
		for _, tool := range res.Tools {
			names[tool.Name] = true
		}
		return names["charge"] && names["hold"], fmt.Sprint(names)
	})
	return d
}

// gwAgent is an agent on the Go SDK's client naming its run in the
// X-Agent-Run-Id header; it records the request id of every tools/call.
type gwAgent struct {
	url     string
	headers map[string]string
	base    *http.Transport

	mu  sync.Mutex
	ids []string
}

func (s *gwSetup) agent(t *testing.T, run string) *gwAgent {
	a := &gwAgent{url: s.url(), headers: map[string]string{"Authorization": "Bearer " + s.token, gwRunHeader: run},
		base: http.DefaultTransport.(*http.Transport).Clone()}
	t.Cleanup(a.base.CloseIdleConnections)
	return a
}

func (a *gwAgent) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if r.Body != nil {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var rpc struct {
			Method string          `json:"method"`
			ID     json.RawMessage `json:"id"`
		}
		if json.Unmarshal(body, &rpc) == nil && rpc.Method == "tools/call" {
			a.mu.Lock()
			a.ids = append(a.ids, string(rpc.ID))
			a.mu.Unlock()
		}
	}
	return testkit.Headers{Base: a.base, Set: a.headers}.RoundTrip(r)
}

// requestIDs returns the request ids of the tools/call sent so far.
func (a *gwAgent) requestIDs() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.ids...)
}

func (a *gwAgent) connect(ctx context.Context) (*sdk.ClientSession, error) {
	c := sdk.NewClient(&sdk.Implementation{Name: "agent", Version: "1"}, nil)
	return c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: a.url, HTTPClient: &http.Client{Transport: a}, MaxRetries: -1}, nil)
}

// fresh connects a new session for a first call.
func (a *gwAgent) fresh(t *testing.T) *sdk.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := a.connect(ctx)
	if err != nil {
		t.Fatalf("connect to the gateway: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// session connects a new session for a re-send: it lists the tools first,
// as a reconnecting harness does, so its tools/call goes under a request id
// other than the first call's (the SDK numbers each session's requests
// from 1).
func (a *gwAgent) session(t *testing.T) *sdk.ClientSession {
	t.Helper()
	s := a.fresh(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.ListTools(ctx, nil); err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	return s
}

// checkNewIDs checks that the tools/call sent after the first went under
// request ids other than the first's.
func (a *gwAgent) checkNewIDs(t *testing.T, want int) {
	t.Helper()
	ids := a.requestIDs()
	if len(ids) != want {
		t.Fatalf("%d tools/call sent (request ids %v), want %d", len(ids), ids, want)
	}
	for _, id := range ids[1:] {
		if id == ids[0] {
			t.Fatalf("tools/call request ids %v: a re-send went under the first call's id", ids)
		}
	}
}

// call makes one tools/call and fails the test on a JSON-RPC or transport error.
func (a *gwAgent) call(t *testing.T, s *sdk.ClientSession, tool string, args map[string]any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := s.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("tools/call %s: %v", tool, err)
	}
	return res
}

// gwBody is a result as JSON with sorted keys, without _meta and
// resultType, to compare answers.
func gwBody(t *testing.T, r *sdk.CallToolResult) string {
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
	if m["isError"] == false {
		delete(m, "isError")
	}
	b, err = json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func gwKey(r *sdk.CallToolResult) string {
	k, _ := r.Meta[gwMetaKey].(string)
	return k
}

// gwRow reads the status and attempts of the row of run and tool, if any.
func gwRow(t *testing.T, pool *pgxpool.Pool, run, tool string) (outboxRow, bool) {
	t.Helper()
	var r outboxRow
	err := pool.QueryRow(context.Background(),
		`SELECT key, status, attempts, last_error FROM drainer.outbox WHERE agent_run_id = $1 AND tool_name = $2`, run, tool).
		Scan(&r.Key, &r.Status, &r.Attempts, &r.LastError)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, false
	}
	if err != nil {
		t.Fatalf("read the row of %s %s: %v", run, tool, err)
	}
	return r, true
}

// waitHeld waits until the hold call of gate is at the tool and its row in
// flight.
func waitHeld(t *testing.T, d *daemon, s *gwSetup, run, gate string) outboxRow {
	t.Helper()
	var r outboxRow
	testkit.WaitFor(t, time.Minute, "the hold call in flight at the tool", func() (bool, string) {
		d.requireRunning()
		var ok bool
		r, ok = gwRow(t, s.pool, run, "hold")
		n := s.ts.count(func() int { return s.ts.arrived[gate] })
		return ok && r.Status == "in_flight" && n == 1, fmt.Sprintf("row %s (found %v), %d calls at the tool", r.Status, ok, n)
	})
	return r
}

// checkOnce checks that the key took effect once, that res is the result
// of that effect, and that res carries the key and, when replay, the
// replay mark.
func checkOnce(t *testing.T, ts *gwToolServer, what string, res *sdk.CallToolResult, key string, replay bool) {
	t.Helper()
	if res.IsError {
		t.Fatalf("%s answered isError: %s %v", what, gwBody(t, res), res.Meta)
	}
	if got := gwKey(res); got != key {
		t.Fatalf("%s answered for key %q, want %q", what, got, key)
	}
	if got := res.Meta[gwMetaReplay] == true; got != replay {
		t.Fatalf("%s: _meta %v, want replay %v", what, res.Meta, replay)
	}
	if got, want := gwBody(t, res), ts.resultBody(t, key); got != want {
		t.Fatalf("%s answered\n %s\nnot the result of the key's effect\n %s", what, got, want)
	}
	if n := ts.count(func() int { return ts.effects[key] }); n != 1 {
		t.Fatalf("%s: key %s took effect %d times upstream, want 1", what, key, n)
	}
}

// checkNotSent checks that the tool has handled key sent times still: what
// was called since never reached it.
func checkNotSent(t *testing.T, ts *gwToolServer, what, key string, sent int) {
	t.Helper()
	if n := ts.count(func() int { return ts.requests[key] }); n != sent {
		t.Fatalf("%s reached the tool: it handled key %s %d times, %d before", what, key, n, sent)
	}
}

// TestGatewaySIGKILLWithACallInFlight: drainer is SIGKILLed while an
// agent's call is in flight at the tool; the tool then takes effect (its
// answer lost). A new drainer on the same gateway address answers the
// agent's re-send (a new session, a new request id) with the result of that
// one effect, once the row's lease expired and it was sent again with its
// key; a further re-send gets the identical answer, nothing sent upstream.
func TestGatewaySIGKILLWithACallInFlight(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := newGWSetup(t, "11s", "5s")
	d1 := s.start(t, "drainer-gateway-1")
	agent := s.agent(t, "run-sigkill")
	args := map[string]any{"gate": "kill", "amount": 42}

	first := agent.fresh(t)
	lost := make(chan error, 1)
	go func() {
		_, err := first.CallTool(context.Background(), &sdk.CallToolParams{Name: "hold", Arguments: args})
		lost <- err
	}()
	row := waitHeld(t, d1, s, "run-sigkill", "kill")
	d1.signal(syscall.SIGKILL)
	_ = d1.wait(time.Minute)
	select {
	case err := <-lost:
		if err == nil {
			t.Fatal("the call in flight was answered though its drainer was SIGKILLed before the tool answered")
		}
	case <-time.After(time.Minute):
		t.Fatal("the agent's call did not end within a minute of its drainer's SIGKILL")
	}
	s.ts.release("kill")

	d2 := s.start(t, "drainer-gateway-2")
	resend := agent.call(t, agent.session(t), "hold", args)
	checkOnce(t, s.ts, "the re-send after the restart", resend, row.Key, true)
	sent := s.ts.count(func() int { return s.ts.requests[row.Key] })
	again := agent.call(t, agent.session(t), "hold", args)
	checkOnce(t, s.ts, "a further re-send", again, row.Key, true)
	checkNotSent(t, s.ts, "a further re-send", row.Key, sent)
	if gwBody(t, again) != gwBody(t, resend) {
		t.Fatalf("re-sends answered differently:\n %s\n %s", gwBody(t, resend), gwBody(t, again))
	}
	agent.checkNewIDs(t, 3)
	if r, _ := gwRow(t, s.pool, "run-sigkill", "hold"); r.Status != "succeeded" {
		t.Errorf("the row is %s (last_error %s), want succeeded", r.Status, mcpDeref(r.LastError))
	}
	if n := s.ts.count(func() int { return s.ts.requests[row.Key] }); n < 2 {
		t.Errorf("the tool handled key %s %d times: the reclaimed row was not sent again", row.Key, n)
	}
	d2.requireRunning()
	t.Logf("answered after the restart in %v (%v in all)", time.Since(d2.started).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// TestGatewayUpstreamRestartMidCall: the tool server stops while a call is
// at its tool (connections cut), hangs up every connection for a while, and
// starts again on the same address as a new server; the tool took effect
// meanwhile, its answer lost. The agent's call, still waiting at the
// gateway, ends with the result of that one effect, and every re-send is
// answered the same.
func TestGatewayUpstreamRestartMidCall(t *testing.T) {
	t.Parallel()
	s := newGWSetup(t, "70s", "60s")
	d := s.start(t, "drainer-gateway")
	agent := s.agent(t, "run-upstream")
	args := map[string]any{"gate": "upstream", "amount": 7}

	type answer struct {
		res *sdk.CallToolResult
		err error
	}
	pending := make(chan answer, 1)
	sess := agent.fresh(t)
	go func() {
		res, err := sess.CallTool(context.Background(), &sdk.CallToolParams{Name: "hold", Arguments: args})
		pending <- answer{res, err}
	}()
	row := waitHeld(t, d, s, "run-upstream", "upstream")
	s.ts.stop()
	s.ts.refuse(t)
	testkit.WaitFor(t, time.Minute, "drainer to try the stopped server again", func() (bool, string) {
		d.requireRunning()
		n := s.ts.count(func() int { return s.ts.hangups })
		return n > 0, fmt.Sprintf("%d connections hung up", n)
	})
	s.ts.release("upstream")
	testkit.WaitFor(t, time.Minute, "the cut-off tool to take effect", func() (bool, string) {
		n := s.ts.count(func() int { return s.ts.effects[row.Key] })
		return n == 1, fmt.Sprintf("%d effects", n)
	})
	s.ts.endRefusing()
	s.ts.start(t)

	var got answer
	select {
	case got = <-pending:
	case <-time.After(3 * time.Minute):
		t.Fatal("the agent's call was not answered within 3 minutes of the tool server's restart")
	}
	if got.err != nil {
		t.Fatalf("the agent's call: %v", got.err)
	}
	checkOnce(t, s.ts, "the call waiting through the restart", got.res, row.Key, false)
	sent := s.ts.count(func() int { return s.ts.requests[row.Key] })
	for i := range 3 {
		again := agent.call(t, agent.session(t), "hold", args)
		checkOnce(t, s.ts, fmt.Sprintf("re-send %d", i), again, row.Key, true)
		if gwBody(t, again) != gwBody(t, got.res) {
			t.Fatalf("re-send %d answered\n %s\nnot as the call\n %s", i, gwBody(t, again), gwBody(t, got.res))
		}
	}
	checkNotSent(t, s.ts, "the re-sends", row.Key, sent)
	r, _ := gwRow(t, s.pool, "run-upstream", "hold")
	if r.Status != "succeeded" {
		t.Errorf("the row is %s (last_error %s), want succeeded", r.Status, mcpDeref(r.LastError))
	}
	if n := s.ts.count(func() int { return s.ts.requests[row.Key] }); n < 2 {
		t.Errorf("the tool handled key %s %d times: the call was not sent again after the restart", row.Key, n)
	}
	t.Logf("row attempts %d; %d connections hung up while the server was down",
		r.Attempts, s.ts.count(func() int { return s.ts.hangups }))
}

// TestGatewayCutConnectionThenResend: the agent gives up on a call while
// its tool runs (its HTTP request is cut); once the tool is released, the
// re-send under a new request id is answered with the recorded result, one
// effect. Then a second call is cut the same way and re-sent by 20 agents at
// once while its tool still runs: all get the same answer, the tool ran once.
func TestGatewayCutConnectionThenResend(t *testing.T) {
	t.Parallel()
	s := newGWSetup(t, "70s", "60s")
	d := s.start(t, "drainer-gateway")
	agent := s.agent(t, "run-cut")

	cut := func(gate string) outboxRow {
		t.Helper()
		sess := agent.fresh(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ended := make(chan error, 1)
		go func() {
			_, err := sess.CallTool(ctx, &sdk.CallToolParams{Name: "hold", Arguments: map[string]any{"gate": gate}})
			ended <- err
		}()
		row := waitHeldGate(t, d, s, gate)
		cancel()
		select {
		case err := <-ended:
			if err == nil {
				t.Fatalf("the cut call of %s was answered", gate)
			}
		case <-time.After(time.Minute):
			t.Fatalf("the cut call of %s did not end within a minute", gate)
		}
		return row
	}

	rowA := cut("a")
	s.ts.release("a")
	resend := agent.call(t, agent.session(t), "hold", map[string]any{"gate": "a"})
	checkOnce(t, s.ts, "the re-send of the cut call", resend, rowA.Key, true)
	if n := s.ts.count(func() int { return s.ts.requests[rowA.Key] }); n != 1 {
		t.Fatalf("the tool handled key %s %d times, want 1", rowA.Key, n)
	}
	agent.checkNewIDs(t, 2)

	rowB := cut("b")
	const n = 20
	sessions := make([]*sdk.ClientSession, n)
	for i := range sessions {
		sessions[i] = agent.session(t)
	}
	answers := make([]*sdk.CallToolResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, sess := range sessions {
		wg.Go(func() {
			answers[i], errs[i] = sess.CallTool(context.Background(), &sdk.CallToolParams{Name: "hold", Arguments: map[string]any{"gate": "b"}})
		})
	}
	s.ts.release("b")
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i, res := range answers {
		checkOnce(t, s.ts, fmt.Sprintf("concurrent re-send %d", i), res, rowB.Key, true)
	}
	if n := s.ts.count(func() int { return s.ts.requests[rowB.Key] }); n != 1 {
		t.Fatalf("the tool handled key %s %d times, want 1", rowB.Key, n)
	}
	t.Logf("gateway outcomes for hold: created %v, joined %v, replayed %v, timeout %v",
		d.metric("drainer_gateway_calls_total", `tool="hold"`, `outcome="created"`),
		d.metric("drainer_gateway_calls_total", `tool="hold"`, `outcome="joined"`),
		d.metric("drainer_gateway_calls_total", `tool="hold"`, `outcome="replayed"`),
		d.metric("drainer_gateway_calls_total", `tool="hold"`, `outcome="timeout"`))
}

// waitHeldGate is waitHeld for a run with several hold rows: the row whose
// payload names gate.
func waitHeldGate(t *testing.T, d *daemon, s *gwSetup, gate string) outboxRow {
	t.Helper()
	var r outboxRow
	testkit.WaitFor(t, time.Minute, "the hold call of "+gate+" in flight at the tool", func() (bool, string) {
		d.requireRunning()
		err := s.pool.QueryRow(context.Background(),
			`SELECT key, status, attempts FROM drainer.outbox WHERE tool_name = 'hold' AND payload->>'gate' = $1`, gate).
			Scan(&r.Key, &r.Status, &r.Attempts)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		n := s.ts.count(func() int { return s.ts.arrived[gate] })
		return err == nil && r.Status == "in_flight" && n == 1, fmt.Sprintf("row %q (%v), %d calls at the tool", r.Status, err, n)
	})
	return r
}

// gwTSDir is the npm project of the TypeScript agent (make gateway-ts).
const gwTSDir = "testdata/gateway-ts"

// gwTSSummary is what client.mjs prints.
type gwTSSummary struct {
	RequestIDs []json.RawMessage `json:"requestIds"`
	Answers    []struct {
		Phase             string          `json:"phase"`
		Content           json.RawMessage `json:"content"`
		StructuredContent json.RawMessage `json:"structuredContent"`
		IsError           bool            `json:"isError"`
		Meta              map[string]any  `json:"meta"`
	} `json:"answers"`
}

// TestGatewayTypeScriptClient: an agent on the official TypeScript SDK
// (npm @modelcontextprotocol/sdk, locked) calls charge through the gateway,
// again after reopening its transport, then 10 times at once: every answer
// is the result of the one effect, only the first not a replay.
func TestGatewayTypeScriptClient(t *testing.T) {
	t.Parallel()
	dir := gwTSPrepare(t)
	s := newGWSetup(t, "70s", "60s")
	d := s.start(t, "drainer-gateway")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "client.mjs")
	cmd.Dir = dir
	cmd.Env = childEnv("GATEWAY_URL="+s.url(), "GATEWAY_TOKEN="+s.token, "AGENT_RUN_ID=run-ts",
		"TOOL=charge", `ARGS={"amount":12,"card":"tok_visa"}`)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node client.mjs: %v\nstdout:\n%s\nstderr:\n%s", err, tail(stdout.String(), 4000), tail(stderr.String(), 4000))
	}
	var sum gwTSSummary
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatalf("node client.mjs printed no summary (%v):\n%s\nstderr:\n%s", err, tail(stdout.String(), 4000), tail(stderr.String(), 4000))
	}
	row, ok := gwRow(t, s.pool, "run-ts", "charge")
	if !ok || row.Status != "succeeded" {
		t.Fatalf("the row of run-ts charge: %+v (found %v), want succeeded", row, ok)
	}
	var want struct{ Content, StructuredContent json.RawMessage }
	if err := json.Unmarshal([]byte(s.ts.resultBody(t, row.Key)), &want); err != nil {
		t.Fatal(err)
	}
	wantContent, wantStructured := want.Content, want.StructuredContent
	if len(sum.Answers) != 12 {
		t.Fatalf("%d answers, want 12:\n%s", len(sum.Answers), stdout.String())
	}
	for i, a := range sum.Answers {
		replay := a.Meta[gwMetaReplay] == true
		if a.IsError || !mcpJSONEqual(t, string(a.Content), string(wantContent)) ||
			!mcpJSONEqual(t, string(a.StructuredContent), string(wantStructured)) || a.Meta[gwMetaKey] != row.Key {
			t.Errorf("answer %d (%s): isError %v content %s structuredContent %s _meta %v; want the result of the one effect\n %s %s for key %s",
				i, a.Phase, a.IsError, a.Content, a.StructuredContent, a.Meta, wantContent, wantStructured, row.Key)
		}
		if wantReplay := a.Phase != "first"; replay != wantReplay {
			t.Errorf("answer %d (%s): _meta %v, want replay %v", i, a.Phase, a.Meta, wantReplay)
		}
	}
	seen := map[string]bool{}
	for _, id := range sum.RequestIDs {
		seen[string(id)] = true
	}
	if len(sum.RequestIDs) != 12 || len(seen) != 12 {
		t.Errorf("tools/call request ids %s: want 12 distinct", sum.RequestIDs)
	}
	if e, r := s.ts.count(func() int { return s.ts.effects[row.Key] }), s.ts.count(func() int { return s.ts.requests[row.Key] }); e != 1 || r != 1 {
		t.Errorf("key %s: %d effects, %d requests upstream; want 1 and 1", row.Key, e, r)
	}
	d.requireRunning()
}

// gwTSPrepare returns the absolute path of the TypeScript agent's npm
// project once its locked dependencies are installed, running npm ci
// itself when they are missing (what `make gateway-ts` does).
func gwTSPrepare(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node not found (%v): install Node 20; the TypeScript agent test needs it", err)
	}
	dir, err := filepath.Abs(gwTSDir)
	if err != nil {
		t.Fatal(err)
	}
	if tsExists(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")) {
		return dir
	}
	if _, err := os.Stat(filepath.Join(dir, "package-lock.json")); err != nil {
		t.Fatalf("%s has no package-lock.json: %v", dir, err)
	}
	t.Logf("%s: node_modules missing: running npm ci (what `make gateway-ts` does)", dir)
	if out, errOut, code := tsRunNPM(t, dir, 5*time.Minute, nil, "ci", "--no-audit", "--no-fund"); code != 0 {
		t.Fatalf("npm ci in %s exited %d; run `make gateway-ts` and see its output:\n%s\n%s", dir, code, tail(out, 4000), tail(errOut, 4000))
	}
	return dir
}
