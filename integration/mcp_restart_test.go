//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// mcpCall is one tools/call POST a front door saw, and how it was answered.
type mcpCall struct {
	key, headerKey, session, metaProto string
	status                             int
	body                               string // the start of a non-2xx answer
}

// restartGate holds new requests while a server restarts, and waits for
// those in flight first, so a restart never cuts a call in the middle: every
// call either reached the old server and was answered, or reaches the new
// one with the old session.
type restartGate struct {
	mu         sync.RWMutex // held for reading by each request in flight
	stats      sync.Mutex
	answered   int   // tools/call answered 2xx
	thresholds []int // restart when answered reaches each
	restarts   int
	calls      []mcpCall
}

// before is called at the start of a tools/call: when the 2xx answers so
// far reached the next threshold, restart runs with no request in flight.
func (g *restartGate) before(restart func()) {
	g.stats.Lock()
	due := len(g.thresholds) > 0 && g.answered >= g.thresholds[0]
	if due {
		g.thresholds = g.thresholds[1:]
	}
	g.stats.Unlock()
	if due {
		g.mu.Lock()
		restart()
		g.stats.Lock()
		g.restarts++
		g.stats.Unlock()
		g.mu.Unlock()
	}
}

func (g *restartGate) record(c mcpCall) {
	g.stats.Lock()
	defer g.stats.Unlock()
	if c.status/100 == 2 {
		g.answered++
	}
	g.calls = append(g.calls, c)
}

func (g *restartGate) snapshot() ([]mcpCall, int) {
	g.stats.Lock()
	defer g.stats.Unlock()
	return append([]mcpCall(nil), g.calls...), g.restarts
}

// parseCall reads what a tools/call body says of the row.
func parseCall(body []byte) (method, key, proto string) {
	var rpc struct {
		Method string `json:"method"`
		Params struct {
			Meta map[string]any `json:"_meta"`
		} `json:"params"`
	}
	_ = json.Unmarshal(body, &rpc)
	key, _ = rpc.Params.Meta[mcpMetaKey].(string)
	proto, _ = rpc.Params.Meta["io.modelcontextprotocol/protocolVersion"].(string)
	return rpc.Method, key, proto
}

// statusRecorder remembers the status and the start of the body.
type statusRecorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	if s.status/100 != 2 && s.body.Len() < 512 {
		s.body.Write(p[:min(len(p), 512-s.body.Len())])
	}
	return s.ResponseWriter.Write(p)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// sdkEffectServer is an MCP server built with the go-sdk whose charge tool
// has one effect per idempotency key (a repeated key is answered from its
// record), counted across restarts; restarting replaces the SDK server and
// handler, as a new process would: every session is forgotten.
type sdkEffectServer struct {
	srv       *httptest.Server
	gate      restartGate
	stateless bool

	mu      sync.Mutex
	handler http.Handler
	server  *sdk.Server
	effects map[string]int // key → effects
	runs    map[string]int // key → times the tool ran
	inits   int            // initialize POSTs
}

func newSDKEffectServer(t *testing.T, stateless bool, restartAt ...int) *sdkEffectServer {
	s := &sdkEffectServer{stateless: stateless, effects: map[string]int{}, runs: map[string]int{}}
	s.gate.thresholds = restartAt
	s.restart()
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(func() {
		s.srv.Close()
		s.mu.Lock()
		server := s.server
		s.mu.Unlock()
		for ss := range server.Sessions() {
			_ = ss.Close()
		}
	})
	return s
}

func (s *sdkEffectServer) restart() {
	server := sdk.NewServer(&sdk.Implementation{Name: "effects", Version: "1"}, nil)
	server.AddTool(&sdk.Tool{Name: "charge", InputSchema: json.RawMessage(`{"type":"object"}`),
		Annotations: &sdk.ToolAnnotations{DestructiveHint: mcpBool(true)}},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			key, _ := req.Params.Meta[mcpMetaKey].(string)
			time.Sleep(10 * time.Millisecond) // a tool that takes a moment, so the drain is under way at a restart
			s.mu.Lock()
			s.runs[key]++
			first := s.effects[key] == 0
			if first {
				s.effects[key] = 1
			}
			s.mu.Unlock()
			res := &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "charged"}},
				StructuredContent: map[string]any{"charged": key}}
			if !first {
				res.Meta = sdk.Meta{"io.drainer/replay": true}
			}
			return res, nil
		})
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return server },
		&sdk.StreamableHTTPOptions{Stateless: s.stateless})
	s.mu.Lock()
	old := s.server
	s.server, s.handler = server, h
	s.mu.Unlock()
	if old != nil {
		for ss := range old.Sessions() {
			_ = ss.Close()
		}
	}
}

func (s *sdkEffectServer) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	method, key, proto := parseCall(body)
	if method == "initialize" {
		s.mu.Lock()
		s.inits++
		s.mu.Unlock()
	}
	if method == "tools/call" {
		s.gate.before(s.restart)
	}
	s.gate.mu.RLock()
	defer s.gate.mu.RUnlock()
	s.mu.Lock()
	h := s.handler
	s.mu.Unlock()
	rec := &statusRecorder{ResponseWriter: w}
	h.ServeHTTP(rec, r)
	if method == "tools/call" {
		s.gate.record(mcpCall{key: key, headerKey: r.Header.Get("Idempotency-Key"), session: r.Header.Get("Mcp-Session-Id"),
			metaProto: proto, status: rec.status, body: rec.body.String()})
	}
}

// enqueueMCP enqueues n rows of tool, each its own run, with payload(i);
// it returns their keys.
func enqueueMCP(t *testing.T, pool *pgxpool.Pool, tool string, n int, payload func(i int) string) []string {
	t.Helper()
	keys := make([]string, n)
	for i := range n {
		run := fmt.Sprintf("run-%03d", i)
		want := idemkey.Tuple{AgentRunID: run, StepID: "s1", ToolName: tool, BusinessScope: "acme"}.Key()
		if err := pool.QueryRow(context.Background(), `SELECT key FROM drainer.enqueue($1, 's1', $2, 'acme', $3::jsonb)`,
			run, tool, payload(i)).Scan(&keys[i]); err != nil || keys[i] != want {
			t.Fatalf("enqueue %d: key %q err %v, want %s", i, keys[i], err, want)
		}
	}
	return keys
}

// TestMCPSDKServerRestartMidDrain: the go-sdk server restarts twice while
// the daemon drains 60 rows, in both of its modes: stateful (sessions: the
// restarted server answers the old session 404) and stateless (2026-07-28:
// no initialize, no session). Every row succeeds, its effect happens once,
// every call of a row carries its key, and a call refused for its session
// costs no attempt: each row ends with attempts 1.
func TestMCPSDKServerRestartMidDrain(t *testing.T) {
	for _, mode := range []string{"stateful", "stateless"} {
		t.Run(mode, func(t *testing.T) {
			dbURL, pool := newMigratedDB(t)
			secret := mcpSecret(t)
			t.Setenv("TOOLS_TOKEN", secret)
			s := newSDKEffectServer(t, mode == "stateless", 15, 35)
			cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", mcpConfig(s.srv.URL+"/mcp", `  charge:
    adapter: tools_server
    class: key_idempotent
    backoff: {base: 50ms, cap: 500ms}
`))
			d := startDaemon(t, "drainer-mcp-restart-"+mode, "--config", cfgPath, "--database-url", dbURL)
			d.waitReady(2 * time.Minute)
			keys := enqueueMCP(t, pool, "charge", 60, func(i int) string { return fmt.Sprintf(`{"amount":%d}`, i+1) })
			testkit.WaitFor(t, 2*time.Minute, "every row succeeded", func() (bool, string) {
				d.requireRunning()
				c := statusCounts(t, pool)
				return c["succeeded"] == len(keys), fmt.Sprint(c)
			})
			calls, restarts := s.gate.snapshot()
			if restarts != 2 {
				t.Errorf("the server restarted %d times, want 2", restarts)
			}
			byKey := map[string][]mcpCall{}
			refused := 0
			for _, c := range calls {
				byKey[c.key] = append(byKey[c.key], c)
				if c.headerKey != c.key {
					t.Errorf("tools/call with _meta key %q carried Idempotency-Key %q", c.key, c.headerKey)
				}
				if c.status/100 != 2 {
					refused++
				}
				if mode == "stateless" && (c.session != "" || c.metaProto != "2026-07-28") {
					t.Errorf("stateless tools/call: session %q, _meta protocolVersion %q", c.session, c.metaProto)
				}
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			for _, k := range keys {
				if s.effects[k] != 1 || s.runs[k] != 1 {
					t.Errorf("key %s: effects %d, tool ran %d times; want 1 and 1", k, s.effects[k], s.runs[k])
				}
				if r := readRow(t, pool, k); r.Attempts != 1 {
					t.Errorf("key %s: attempts %d (last_error %s), want 1", k, r.Attempts, mcpDeref(r.LastError))
				}
			}
			if len(s.effects) != len(keys) {
				t.Errorf("effects for %d keys, want %d", len(s.effects), len(keys))
			}
			switch mode {
			case "stateful":
				if refused == 0 || s.inits < 3 {
					t.Errorf("%d calls refused for their session, %d initialize: want the restarts to have refused calls and sessions re-established", refused, s.inits)
				}
			case "stateless":
				if refused != 0 || s.inits != 0 {
					t.Errorf("stateless: %d calls refused, %d initialize; want none", refused, s.inits)
				}
			}
			t.Logf("%s: %d tools/call for %d rows, %d refused for a lost session, %d initialize", mode, len(calls), len(keys), refused, s.inits)
		})
	}
}

// everythingDir holds the npm-installed reference server (make mcp-everything).
const everythingDir = "testdata/mcp-everything"

// everythingServer runs @modelcontextprotocol/server-everything on port.
type everythingServer struct {
	port int
	cmd  *exec.Cmd
	out  *testkit.Buffer
	done chan struct{}
}

func everythingEntry(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node not found (%v): install Node 20; the MCP reference server test needs it", err)
	}
	entry, err := filepath.Abs(filepath.Join(everythingDir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(entry); err != nil {
		t.Fatalf("the MCP reference server is not installed (%v): run `make mcp-everything` (npm ci in integration/%s)", err, everythingDir)
	}
	return entry
}

// start starts the server and waits until it listens. It may run on a
// server goroutine (a restart), so it reports instead of failing the test.
func (e *everythingServer) start(entry string) error {
	e.out = &testkit.Buffer{}
	e.cmd = exec.Command("node", entry, "streamableHttp")
	e.cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(e.port))
	e.cmd.Stdout, e.cmd.Stderr = e.out, e.out
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := e.cmd.Start(); err != nil {
		e.cmd = nil
		return fmt.Errorf("start the MCP reference server: %w", err)
	}
	e.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(e.cmd, e.done)
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(e.port), time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-e.done:
			return fmt.Errorf("the MCP reference server exited at start:\n%s", tail(e.out.String(), 2000))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the MCP reference server does not listen on %d after a minute:\n%s", e.port, tail(e.out.String(), 2000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *everythingServer) stop() {
	if e.cmd == nil {
		return
	}
	_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
	<-e.done
	e.cmd = nil
}

// TestMCPEverythingRestartMidDrain: the daemon drains 30 rows to the MCP
// reference server (npm @modelcontextprotocol/server-everything), which is
// restarted twice mid-drain. The restarted server answers the old session
// 400 "No valid session ID provided": the adapter re-establishes a session
// and sends the same call again. Every row succeeds, each answered once,
// at its first attempt; none fails.
func TestMCPEverythingRestartMidDrain(t *testing.T) {
	entry := everythingEntry(t)
	dbURL, pool := newMigratedDB(t)
	t.Setenv("TOOLS_TOKEN", "unused")
	ev := &everythingServer{port: freePort(t)}
	t.Cleanup(ev.stop)
	if err := ev.start(entry); err != nil {
		t.Fatal(err)
	}

	// A front door that records each tools/call and restarts the server
	// (with no call in flight) after 10 and 20 answered calls.
	gate := &restartGate{thresholds: []int{10, 20}}
	target, _ := url.Parse("http://127.0.0.1:" + strconv.Itoa(ev.port))
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1
	// The front door's own connections to the server it restarts are
	// dropped with each restart: a kept-alive one to the killed process,
	// reused before its close was noticed (a loaded machine), would answer
	// the next call 502 from the front door itself.
	transport := http.DefaultTransport.(*http.Transport).Clone()
	proxy.Transport = transport
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		method, key, proto := parseCall(body)
		if method == "tools/call" {
			gate.before(func() {
				ev.stop()
				transport.CloseIdleConnections()
				if err := ev.start(entry); err != nil {
					t.Errorf("restart: %v", err)
				}
			})
		}
		gate.mu.RLock()
		defer gate.mu.RUnlock()
		rec := &statusRecorder{ResponseWriter: w}
		proxy.ServeHTTP(rec, r)
		if method == "tools/call" {
			gate.record(mcpCall{key: key, headerKey: r.Header.Get("Idempotency-Key"), session: r.Header.Get("Mcp-Session-Id"),
				metaProto: proto, status: rec.status, body: rec.body.String()})
		}
	}))
	defer front.Close()

	cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", mcpConfig(front.URL+"/mcp", `  echo:
    adapter: tools_server
    class: naturally_idempotent
    backoff: {base: 50ms, cap: 500ms}
`))
	d := startDaemon(t, "drainer-mcp-everything", "--config", cfgPath, "--database-url", dbURL)
	d.waitReady(2 * time.Minute)
	keys := enqueueMCP(t, pool, "echo", 30, func(i int) string { return fmt.Sprintf(`{"message":"row-%d"}`, i) })
	testkit.WaitFor(t, 3*time.Minute, "no row pending or in_flight", func() (bool, string) {
		d.requireRunning()
		c := statusCounts(t, pool)
		return c["pending"] == 0 && c["in_flight"] == 0, fmt.Sprint(c)
	})
	if c := statusCounts(t, pool); c["succeeded"] != len(keys) {
		t.Errorf("status counts %v, want all %d succeeded", c, len(keys))
	}
	calls, restarts := gate.snapshot()
	if restarts != 2 {
		t.Errorf("the server restarted %d times, want 2", restarts)
	}
	answered := map[string]int{}
	lost := 0
	for _, c := range calls {
		if c.headerKey != c.key {
			t.Errorf("tools/call with _meta key %q carried Idempotency-Key %q", c.key, c.headerKey)
		}
		switch {
		case c.status/100 == 2:
			answered[c.key]++
		case c.status == http.StatusBadRequest && strings.Contains(c.body, "No valid session ID provided"):
			lost++
		default:
			t.Errorf("tools/call %s answered %d %q", c.key, c.status, c.body)
		}
	}
	for i, k := range keys {
		r := readRow(t, pool, k)
		want := fmt.Sprintf(`{"content":[{"type":"text","text":"Echo: row-%d"}]}`, i)
		if r.Status != "succeeded" || r.Attempts != 1 || r.Response == nil || !mcpJSONEqual(t, *r.Response, want) {
			t.Errorf("row %d: status %s attempts %d response %s last_error %s; want succeeded at attempt 1 with %s",
				i, r.Status, r.Attempts, mcpDeref(r.Response), mcpDeref(r.LastError), want)
		}
		if answered[k] != 1 {
			t.Errorf("row %d: answered %d times, want once", i, answered[k])
		}
	}
	if lost == 0 {
		t.Errorf("no call was refused with 400 \"No valid session ID provided\": the restarts did not reach a session")
	}
	t.Logf("%d tools/call for %d rows, %d refused with 400 \"No valid session ID provided\"", len(calls), len(keys), lost)
}

// TestMCPUnreachableDoesNotHoldHTTP: an MCP server that hangs up on every
// connection at startup does not hold an http route: the daemon starts at
// once, the http row drains while the MCP server is still down, and the
// MCP row waits (pending, no attempt consumed) until the server answers,
// then drains once.
func TestMCPUnreachableDoesNotHoldHTTP(t *testing.T) {
	dbURL, pool := newMigratedDB(t)
	secret := mcpSecret(t)
	t.Setenv("TOOLS_TOKEN", secret)
	ts := newMCPToolServer(t, secret)
	var httpHits atomic.Int64
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		httpHits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"charged":true}`)
	}))
	defer provider.Close()

	target, _ := url.Parse(ts.srv.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1
	// The front door's own connections to the server it restarts are
	// dropped with each restart: a kept-alive one to the killed process,
	// reused before its close was noticed (a loaded machine), would answer
	// the next call 502 from the front door itself.
	transport := http.DefaultTransport.(*http.Transport).Clone()
	proxy.Transport = transport
	var down atomic.Bool
	var hangups atomic.Int64
	down.Store(true)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			hangups.Add(1)
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				c.Close()
			}
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()

	cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", fmt.Sprintf(`workers: 4
lease: 40s
unrouted_recheck: 1s
adapters:
  payments:
    type: http
    url: %s/{tool_name}
    timeout: 5s
  tools_server:
    type: mcp
    url: %s/mcp
    timeout: 10s
    headers: {Authorization: "Bearer ${env:TOOLS_TOKEN}"}
routes:
  charge_card: {adapter: payments, class: key_idempotent}
  create_ticket: {adapter: tools_server, class: key_idempotent}
`, provider.URL, front.URL))
	var httpKey, mcpKey string
	if err := pool.QueryRow(context.Background(),
		`SELECT key FROM drainer.enqueue('run-1', 's1', 'charge_card', 'acme', '{"amount":5}'::jsonb)`).Scan(&httpKey); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(context.Background(),
		`SELECT key FROM drainer.enqueue('run-2', 's1', 'create_ticket', 'acme', '{"title":"Disk full"}'::jsonb)`).Scan(&mcpKey); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, "drainer-mcp-unreachable-http", "--config", cfgPath, "--database-url", dbURL)
	testkit.WaitFor(t, time.Minute, "the http row succeeded while the MCP server is down", func() (bool, string) {
		d.requireRunning()
		r := readRow(t, pool, httpKey)
		return r.Status == "succeeded", r.Status
	})
	if !down.Load() || hangups.Load() == 0 {
		t.Fatalf("down %v, %d hang-ups: the MCP server must have been tried and still be down", down.Load(), hangups.Load())
	}
	mcpRowWaits(t, d, pool, mcpKey)
	// Long enough down for the row to have been held several times.
	testkit.WaitFor(t, time.Minute, "the MCP row held back several times", func() (bool, string) {
		d.requireRunning()
		n := d.metric("drainer_dispatch_total", `adapter="tools_server"`)
		return n >= 6, fmt.Sprint(n)
	})
	mcpRowWaits(t, d, pool, mcpKey)
	// Held back, not refused by the provider: the breaker (5 consecutive
	// failures by default) stays closed, so nothing holds the row once the
	// server is up.
	if v := d.metric("drainer_circuit_breaker_state", `adapter="tools_server"`); v != 0 {
		t.Errorf(`drainer_circuit_breaker_state{adapter="tools_server"} = %v while the adapter connects, want 0 (closed)`, v)
	}
	// The replica stays ready, and says which adapter is not.
	if code, body := d.get("/readyz"); code != 200 || !strings.Contains(body, "tools_server") {
		t.Errorf("/readyz while the MCP server is down: %d %q, want 200 naming tools_server", code, body)
	}
	if v := d.metric("drainer_adapter_ready", `adapter="tools_server"`); v != 0 {
		t.Errorf(`drainer_adapter_ready{adapter="tools_server"} = %v while it connects, want 0`, v)
	}
	if v := d.metric("drainer_adapter_ready", `adapter="payments"`); v != 1 {
		t.Errorf(`drainer_adapter_ready{adapter="payments"} = %v, want 1`, v)
	}
	down.Store(false)
	up := time.Now()
	testkit.WaitFor(t, 2*time.Minute, "the MCP row succeeded once its server answers", func() (bool, string) {
		d.requireRunning()
		r := readRow(t, pool, mcpKey)
		return r.Status == "succeeded", r.Status + " " + mcpDeref(r.LastError)
	})
	t.Logf("the MCP row drained %v after its server came up", time.Since(up).Round(10*time.Millisecond))
	if v := d.metric("drainer_adapter_ready", `adapter="tools_server"`); v != 1 {
		t.Errorf(`drainer_adapter_ready{adapter="tools_server"} = %v once its server answered, want 1`, v)
	}
	if r := readRow(t, pool, mcpKey); r.Attempts != 1 {
		t.Errorf("MCP row: attempts %d, want 1 (waiting consumed none)", r.Attempts)
	}
	_, handled, _, _ := ts.snapshot()
	if n := len(handled); n != 1 || handled[0].key != mcpKey {
		t.Errorf("the MCP tool ran %d times, want once for the row", n)
	}
	if httpHits.Load() != 1 {
		t.Errorf("the http provider got %d requests, want 1", httpHits.Load())
	}
	if strings.Contains(d.stderr.String(), secret) {
		t.Errorf("drainer run output contains the TOOLS_TOKEN secret")
	}
	d.signal(syscall.SIGTERM)
	if code := d.exitCode(time.Minute); code != 0 {
		t.Errorf("drainer run exited %d after SIGTERM, want 0", code)
	}
}

// mcpRowWaits checks that the row of key, whose MCP server is down, waits
// without consuming an attempt. The daemon keeps claiming it and handing it
// back (a claim counts its attempt until the hand-back gives it back), so
// the row is judged as read between two claims.
func mcpRowWaits(t *testing.T, d *daemon, pool *pgxpool.Pool, key string) {
	t.Helper()
	var r outboxRow
	testkit.WaitFor(t, time.Minute, "the MCP row read between two claims", func() (bool, string) {
		d.requireRunning()
		r = readRow(t, pool, key)
		return r.Status != "in_flight", r.Status
	})
	if r.Status != "pending" || r.Attempts != 0 {
		t.Errorf("MCP row while its server is down: status %s attempts %d (last_error %s); want pending, 0",
			r.Status, r.Attempts, mcpDeref(r.LastError))
	}
}
