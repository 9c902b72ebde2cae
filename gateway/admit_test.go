package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/gateway"
	"github.com/drainer-io/drainer/internal/daemon"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5/pgxpool"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
)

// liveness bounds a wait that only a broken gateway makes long.
const liveness = time.Minute

// peek is a read-only tool served straight through, whose server the test
// holds: each call says so on entered and answers once release is closed.
type peek struct {
	calls   atomic.Int32
	entered chan struct{}
	release chan struct{}
}

func newPeek() *peek {
	return &peek{entered: make(chan struct{}, 16), release: make(chan struct{})}
}

func (p *peek) tool() gateway.Tool {
	return gateway.Tool{Name: "peek", Adapter: "test", Passthrough: true,
		Send: func(ctx context.Context, m *dispatch.Message) dispatch.Result {
			p.calls.Add(1)
			p.entered <- struct{}{}
			select {
			case <-p.release:
			case <-ctx.Done():
				return dispatch.Result{Err: ctx.Err()}
			}
			return dispatch.Result{Record: json.RawMessage(`{"content":[{"type":"text","text":"peeked"}]}`)}
		}}
}

// direct is a gateway built with gateway.New on a database of its own (no
// engine unless the test starts one beside it).
type direct struct {
	gw   *gateway.Gateway
	pool *pgxpool.Pool
	reg  *prometheus.Registry
}

// newDirect serves a gateway with cfg (its listener, database, token and
// registry filled in) and the tools charge and slow (recorded) plus tools.
func newDirect(t *testing.T, pool *pgxpool.Pool, cfg gateway.Config, tools ...gateway.Tool) *direct {
	t.Helper()
	st, err := store.New(storetest.Schema)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	cfg.Listener, cfg.DB, cfg.Store, cfg.Token, cfg.Registerer = ln, pool, st, agentToken, reg
	cfg.Tools = append([]gateway.Tool{{Name: "charge", Adapter: "tools"}, {Name: "slow", Adapter: "tools"}}, tools...)
	gw, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Serve(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = gw.Shutdown(ctx)
	})
	return &direct{gw: gw, pool: pool, reg: reg}
}

func (d *direct) client(t *testing.T, run string) *sdk.ClientSession {
	return (&gw{url: d.gw.URL()}).client(t, agentHeaders(run))
}

// counted is drainer_gateway_calls_total{tool, outcome}.
func (d *direct) counted(t *testing.T, tool string, outcome gateway.Outcome) float64 {
	t.Helper()
	return d.counter(t, "drainer_gateway_calls_total", map[string]string{"tool": tool, "outcome": string(outcome)})
}

// counter is the value of the counter name whose labels include labels (0
// when there is none).
func (d *direct) counter(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := d.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			match := true
			for k, v := range labels {
				match = match && got[k] == v
			}
			if match {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// rows counts the outbox rows of tool.
func rows(t *testing.T, pool *pgxpool.Pool, tool string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM drainer.outbox WHERE tool_name = $1`, tool).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// post sends one raw MCP POST (no Mcp-Protocol-Version header, as a client
// of a revision before 2025-06-18 sends) and returns the status, the
// headers and the body.
func post(t *testing.T, url, run, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+agentToken)
	req.Header.Set(gateway.HeaderAgentRunID, run)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// rpcError is a JSON-RPC error answer.
type rpcError struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func decodeRPCError(t *testing.T, body string) rpcError {
	t.Helper()
	var e rpcError
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.JSONRPC != "2.0" || e.Error.Message == "" {
		t.Fatalf("not a JSON-RPC error (%v): %s", err, body)
	}
	return e
}

func TestBatchIsRefusedBeforeAnythingIsRecordedOrSent(t *testing.T) {
	t.Parallel()
	p := newPeek()
	close(p.release)
	d := newDirect(t, storetest.NewPool(t), gateway.Config{Wait: 2 * time.Second}, p.tool())
	batch := `[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"peek","arguments":{}}},
	           {"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge","arguments":{"amount":1}}}]`
	for _, body := range []string{batch, " \r\n\t" + batch} {
		status, h, got := post(t, d.gw.URL(), "run-batch", body)
		if status != http.StatusBadRequest || !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
			t.Fatalf("a batch: %d %s %s; want 400 with a JSON-RPC error", status, h.Get("Content-Type"), got)
		}
		e := decodeRPCError(t, got)
		if string(e.ID) != "null" || e.Error.Code != -32600 || !strings.Contains(e.Error.Message, "batches are not supported") ||
			!strings.Contains(e.Error.Message, "2026-07-28") || !strings.Contains(e.Error.Message, "2025-11-25") {
			t.Fatalf("a batch's answer: %s", got)
		}
	}
	if n, sent := rows(t, d.pool, "charge"), p.calls.Load(); n != 0 || sent != 0 {
		t.Fatalf("after two batches: %d rows recorded and %d calls sent; want none", n, sent)
	}
	if n := d.counted(t, "", gateway.OutcomeRefused); n != 2 {
		t.Fatalf("refused batches counted %v times, want 2", n)
	}
	// One request in a POST, without the header, is served as before.
	status, _, got := post(t, d.gw.URL(), "run-batch", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"peek","arguments":{}}}`)
	if status != http.StatusOK || !strings.Contains(got, "peeked") || p.calls.Load() != 1 {
		t.Fatalf("a single call: %d %s (%d sent)", status, got, p.calls.Load())
	}
}

// TestMalformedMessagesGetJSONRPCErrors: a body that is not JSON, not a
// JSON object, or an object that is neither a request nor a response is
// answered 400 with a JSON-RPC error (parse error, invalid request), and
// nothing is recorded or sent; the SDK answered the first two in plain
// text and accepted the third silently (202). So is a message the SDK
// refuses (a jsonrpc other than 2.0, an id that is an object, a method it
// does not serve, a tools/call without params), which it answered in
// plain text: the error carries the request's id, when it has one.
func TestMalformedMessagesGetJSONRPCErrors(t *testing.T) {
	t.Parallel()
	p := newPeek()
	close(p.release)
	d := newDirect(t, storetest.NewPool(t), gateway.Config{Wait: 2 * time.Second}, p.tool())
	for body, code := range map[string]int{
		`{not json`:                      -32700,
		`null`:                           -32600,
		`42`:                             -32600,
		`"tools/call"`:                   -32600,
		`{"jsonrpc":"2.0","id":1}`:       -32600,
		`{"jsonrpc":"2.0","id":null}`:    -32600,
		`{"id":7,"method":"tools/list"}`: -32600,
		`{"jsonrpc":"1.0","id":7,"method":"tools/list"}`:       -32600,
		`{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}`: -32600,
		`{"jsonrpc":"2.0","id":7,"method":"nope/such"}`:        -32601,
		`{"jsonrpc":"2.0","id":"seven","method":"tools/call"}`: -32600,
		`{"jsonrpc":"2.0","method":"nope/note"}`:               -32601,
	} {
		status, h, got := post(t, d.gw.URL(), "run-malformed", body)
		if status != http.StatusBadRequest || !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
			t.Errorf("body %s: %d %s %s; want 400 with a JSON-RPC error", body, status, h.Get("Content-Type"), got)
			continue
		}
		e := decodeRPCError(t, got)
		if e.Error.Code != code || !strings.Contains(e.Error.Message, "nothing was recorded or sent") {
			t.Errorf("body %s: %s; want code %d saying nothing was recorded or sent", body, got, code)
		}
		wantID := "null"
		if strings.Contains(body, `"id":7`) {
			wantID = "7"
		} else if strings.Contains(body, `"id":"seven"`) {
			wantID = `"seven"`
		}
		if string(e.ID) != wantID {
			t.Errorf("body %s: id %s, want %s", body, e.ID, wantID)
		}
	}
	if n, sent := rows(t, d.pool, "charge"), p.calls.Load(); n != 0 || sent != 0 {
		t.Fatalf("after malformed messages: %d rows recorded and %d calls sent; want none", n, sent)
	}
	// A well-formed call is served as before.
	status, _, got := post(t, d.gw.URL(), "run-malformed", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"peek","arguments":{}}}`)
	if status != http.StatusOK || !strings.Contains(got, "peeked") {
		t.Fatalf("a single call: %d %s", status, got)
	}
}

// startEngine runs drainer without a gateway on pool, sending the rows of
// charge and slow to ts: the engine of a gateway built beside it.
func startEngine(t *testing.T, pool *pgxpool.Pool, ts *toolServer) {
	t.Helper()
	cfg := fmt.Sprintf(`workers: 4
lease: 3m
adapters:
  tools:
    type: mcp
    url: %s
    timeout: 2m
    headers: {Authorization: "Bearer ${env:GW_TEST_UPSTREAM_TOKEN}"}
routes:
  charge: {adapter: tools, class: key_idempotent}
  slow: {adapter: tools, class: key_idempotent}
`, ts.url)
	path := filepath.Join(t.TempDir(), "drainer.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	runDaemon(t, daemon.Options{ConfigPath: path, DatabaseURL: pool.Config().ConnString()})
}

// TestCallsInProgressAreBounded: with MaxCalls 2, a recorded call held by
// its tool server and a read-only call held by its own take both slots; a
// third call is answered 503 with Retry-After at once, counted refused,
// and nothing of it is recorded or sent. Once the two are answered, the
// same call again is recorded and sent once.
func TestCallsInProgressAreBounded(t *testing.T) {
	t.Parallel()
	ts := newToolServer(t)
	pool := storetest.NewPool(t)
	startEngine(t, pool, ts)
	p := newPeek()
	d := newDirect(t, pool, gateway.Config{Wait: 2 * time.Minute, MaxCalls: 2}, p.tool())
	s := d.client(t, "run-bound")
	var freed sync.Once
	free := func() { freed.Do(func() { close(ts.gate); close(p.release) }) }
	t.Cleanup(free) // first, should the test end early: nothing stays held

	var wg sync.WaitGroup
	answers := make([]*sdk.CallToolResult, 2)
	errs := make([]error, 2)
	for i, tool := range []string{"slow", "peek"} {
		wg.Go(func() {
			answers[i], errs[i] = s.CallTool(context.Background(), &sdk.CallToolParams{Name: tool, Arguments: map[string]any{"n": 1}})
		})
	}
	select {
	case <-p.entered:
	case <-time.After(liveness):
		t.Fatal("the read-only call did not reach its server")
	}
	testkit.WaitFor(t, liveness, "the slow call's row", func() (bool, string) { return rows(t, pool, "slow") == 1, "" })

	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge","arguments":{"amount":3}}}`
	status, h, got := post(t, d.gw.URL(), "run-bound", call)
	if status != http.StatusServiceUnavailable || h.Get("Retry-After") != "1" {
		t.Fatalf("a third call: %d Retry-After %q %s; want 503 with Retry-After: 1", status, h.Get("Retry-After"), got)
	}
	if e := decodeRPCError(t, got); string(e.ID) != "7" || !strings.Contains(e.Error.Message, "not recorded or sent") {
		t.Fatalf("a third call's answer: %s", got)
	}
	// The SDK's client gets an error at once, not a hang.
	if _, err := s.CallTool(context.Background(), &sdk.CallToolParams{Name: "charge", Arguments: map[string]any{"amount": 3}}); err == nil {
		t.Fatal("a third call through the SDK's client was answered")
	}
	if n, e := rows(t, pool, "charge"), ts.count(ts.requests, "charge"); n != 0 || e != 0 {
		t.Fatalf("refused calls: %d rows, %d requests upstream; want none", n, e)
	}
	if n := d.counted(t, "charge", gateway.OutcomeRefused); n != 2 {
		t.Fatalf("refused calls of charge counted %v times, want 2", n)
	}

	free()
	wg.Wait()
	for i, want := range []string{`"slow #1"`, `"peeked"`} {
		if errs[i] != nil || answers[i].IsError || !strings.Contains(body(t, answers[i]), want) {
			t.Fatalf("held call %d: %v %v", i, errs[i], answers[i])
		}
	}
	again := settledCall(t, s, "charge", map[string]any{"amount": 3}, nil)
	if again.IsError || body(t, again) != `{"content":[{"text":"charged #1","type":"text"}],"structuredContent":{"a":"first","charge":1,"z":1}}` {
		t.Fatalf("the refused call again: %s %v", body(t, again), again.Meta)
	}
	if e, r := ts.count(ts.effects, "charge"), ts.count(ts.requests, "charge"); e != 1 || r != 1 {
		t.Fatalf("charge: %d effects and %d requests upstream; want 1 and 1", e, r)
	}
}

// TestRequestsBeingReadAreBounded: with MaxRequests 2, two POSTs whose
// bodies are still arriving take both slots; a third request, of any
// method, is answered 503 with Retry-After at once, unread. Once the two
// bodies arrive, both are answered and requests are taken again. (A probe
// that comes before the gateway began reading a held request takes its
// slot, and the held one is refused: it is sent again.)
func TestRequestsBeingReadAreBounded(t *testing.T) {
	t.Parallel()
	d := newDirect(t, storetest.NewPool(t), gateway.Config{Wait: 2 * time.Second, MaxCalls: 1, MaxRequests: 2})
	addr := strings.TrimPrefix(strings.TrimSuffix(d.gw.URL(), gateway.Path), "http://")
	ping := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	held := make([]net.Conn, 2)
	// hold sends a request's headers and the first half of its body; the
	// rest comes later.
	hold := func(i int) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"+
			"Accept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n%s",
			gateway.Path, addr, agentToken, len(ping), ping[:10])
		held[i] = c
	}
	for i := range held {
		hold(i)
	}
	// answered says whether the gateway answered held request i already: it
	// was refused because a probe below took a slot before the gateway began
	// reading it (on a busy machine, its handler can start that late).
	answered := func(i int) bool {
		if err := held[i].SetReadDeadline(time.Now().Add(10 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		n, _ := held[i].Read(make([]byte, 1))
		if err := held[i].SetReadDeadline(time.Time{}); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	var status int
	var h http.Header
	var got string
	testkit.WaitFor(t, liveness, "a request refused while two are being read", func() (bool, string) {
		status, h, got = post(t, d.gw.URL(), "run-read", list)
		if status == http.StatusServiceUnavailable {
			return true, ""
		}
		for i := range held {
			if answered(i) {
				held[i].Close()
				hold(i)
			}
		}
		return false, fmt.Sprintf("last answer %d %s", status, got)
	})
	if h.Get("Retry-After") != "1" {
		t.Fatalf("a refused request: Retry-After %q", h.Get("Retry-After"))
	}
	if e := decodeRPCError(t, got); e.Error.Code != -32000 || !strings.Contains(e.Error.Message, "not read, recorded or sent") {
		t.Fatalf("a refused request's answer: %s", got)
	}
	for _, c := range held {
		if _, err := io.WriteString(c, ping[10:]); err != nil {
			t.Fatal(err)
		}
		if err := c.SetReadDeadline(time.Now().Add(liveness)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("a held request's answer: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"id":1`) {
			t.Fatalf("a held request once its body arrived: %d %s", resp.StatusCode, b)
		}
	}
	testkit.WaitFor(t, liveness, "a request taken once the two were answered", func() (bool, string) {
		status, _, got = post(t, d.gw.URL(), "run-read", list)
		return status == http.StatusOK && strings.Contains(got, "charge"), fmt.Sprintf("last answer %d %s", status, got)
	})
}

// settledReads is drainer_gateway_settled_reads_total{cause}.
func (d *direct) settledReads(t *testing.T, cause string) float64 {
	t.Helper()
	return d.counter(t, "drainer_gateway_settled_reads_total", map[string]string{"cause": cause})
}

// TestCallOfAnAbortedRunIsAnsweredFromItsFirstRead: a call recorded in a
// run already aborted is created cancelled, settled from its commit on,
// and nothing will announce it. It is answered from its first read, not
// after the periodic recheck (2 s): the call does not wait for a row
// that settled before it began.
func TestCallOfAnAbortedRunIsAnsweredFromItsFirstRead(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	d := newDirect(t, pool, gateway.Config{Wait: time.Minute})
	if _, err := pool.Exec(context.Background(), `INSERT INTO drainer.runs (agent_run_id, abort_reason, aborted_by, aborted_at, saga_state)
		VALUES ('run-gone', 'wrong card', 'test', now(), 'done')`); err != nil {
		t.Fatal(err)
	}
	s := d.client(t, "run-gone")
	res := call(t, s, "charge", map[string]any{"amount": 1}, nil)
	if !res.IsError || res.Meta[gateway.MetaStatus] != "cancelled" {
		t.Fatalf("a call in an aborted run: %s %v; want the cancelled answer", body(t, res), res.Meta)
	}
	if n := d.settledReads(t, "recheck"); n != 0 {
		t.Fatalf("the call was answered by %v periodic rechecks; want its first read", n)
	}
}

// TestCallOfAnUnroutedToolIsNotRecorded: a tool the engine's loaded config
// no longer routes (a reload removed its route) is answered isError at
// once, and nothing is recorded: before, the call was recorded and its row
// waited pending for a route that would not come back.
func TestCallOfAnUnroutedToolIsNotRecorded(t *testing.T) {
	t.Parallel()
	p := newPeek()
	close(p.release)
	d := newDirect(t, storetest.NewPool(t), gateway.Config{Wait: 2 * time.Second,
		Routed: func(tool string) error {
			if tool == "charge" {
				return fmt.Errorf("tool %q has no route in the loaded config", tool)
			}
			return nil
		}}, p.tool())
	status, _, got := post(t, d.gw.URL(), "run-unrouted", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge","arguments":{"amount":1}}}`)
	if status != http.StatusOK || !strings.Contains(got, `"isError":true`) || !strings.Contains(got, "charge was not recorded or sent") ||
		!strings.Contains(got, "has no route in the loaded config") {
		t.Fatalf("a call of an unrouted tool: %d %s", status, got)
	}
	if n := rows(t, d.pool, "charge"); n != 0 {
		t.Fatalf("%d rows recorded for a tool with no route", n)
	}
	status, _, got = post(t, d.gw.URL(), "run-unrouted", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"peek","arguments":{}}}`)
	if status != http.StatusOK || !strings.Contains(got, "peeked") {
		t.Fatalf("a routed tool beside it: %d %s", status, got)
	}
}

// TestRecordedCallOfAToolUnroutedSinceIsAnsweredFromItsRecord: a call
// recorded while its tool had a route, repeated after a reload removed
// it, is answered from its record as any repeat, never told it was not
// recorded; a new call of the tool is refused, recording nothing.
func TestRecordedCallOfAToolUnroutedSinceIsAnsweredFromItsRecord(t *testing.T) {
	t.Parallel()
	ts := newToolServer(t)
	pool := storetest.NewPool(t)
	startEngine(t, pool, ts)
	var unrouted atomic.Bool
	d := newDirect(t, pool, gateway.Config{Wait: liveness,
		Routed: func(tool string) error {
			if unrouted.Load() {
				return fmt.Errorf("tool %q has no route in the loaded config", tool)
			}
			return nil
		}})
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge","arguments":{"amount":1}}}`
	status, _, first := post(t, d.gw.URL(), "run-reloaded", call)
	if status != http.StatusOK || strings.Contains(first, `"isError":true`) || strings.Contains(first, `"error"`) {
		t.Fatalf("first call: %d %s", status, first)
	}
	unrouted.Store(true)
	status, _, got := post(t, d.gw.URL(), "run-reloaded", call)
	if status != http.StatusOK || strings.Contains(got, "not recorded") || strings.Contains(got, `"isError":true`) ||
		!strings.Contains(got, `"io.drainer/replay":true`) {
		t.Fatalf("the same call after its route was removed: %d %s (first: %s)", status, got, first)
	}
	status, _, got = post(t, d.gw.URL(), "run-reloaded", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge","arguments":{"amount":2}}}`)
	if status != http.StatusOK || !strings.Contains(got, "charge was not recorded or sent") {
		t.Fatalf("a new call after its route was removed: %d %s", status, got)
	}
	if n := rows(t, pool, "charge"); n != 1 {
		t.Fatalf("%d rows of charge, want the first call's only", n)
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if n := ts.requests["charge"]; n != 1 {
		t.Fatalf("the tool server had %d requests, want 1", n)
	}
}
