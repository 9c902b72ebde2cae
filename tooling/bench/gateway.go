package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/drainer"
	"github.com/drainer-io/drainer/gateway"
	"github.com/drainer-io/drainer/internal/daemon"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// gatewayClients is how many clients call at once in the gateway phase,
// each with its own MCP session and connection to the gateway and to the
// tool server.
const gatewayClients = 8

// gatewayWarmup is how many calls each client makes on each path before
// anything is measured.
const gatewayWarmup = 4

// gatewayTool is the gateway phase's tool: it answers at once.
const gatewayTool = "bench_echo"

// gatewayConfig is the gateway phase's config: the shipped defaults, one
// mcp adapter pointing at the local tool server (%s: its URL) and its
// route. The gateway is served on a listener of the bench's own.
const gatewayConfig = `# drainer bench: shipped defaults, one mcp adapter behind the gateway.
adapters:
  tools:
    type: mcp
    url: %s
routes:
  ` + gatewayTool + `:
    adapter: tools
`

// gatewayResult is what the gateway phase measured, in ms per call.
type gatewayResult struct {
	direct, through []float64 // sorted; gatewayClients clients at once
	// oneDirect and oneThrough are the same calls made by one client, one
	// at a time: the latency a recorded call adds, without the queueing of
	// gatewayClients calls at once on the machine's cores.
	oneDirect, oneThrough []float64
}

// gatewayPhase measures gateway_overhead_p50_ms and _p99_ms: GatewayCalls
// tools/calls from gatewayClients clients (official Go SDK clients, each
// its own session), first straight to a local MCP server (the official Go
// SDK's) whose tool answers at once, then the same calls through the
// gateway of a `drainer run` in this process in front of that server, each
// call a new step (its own row: recorded, dispatched by the engine,
// answered from its record). The overhead is a percentile through the
// gateway minus the same percentile direct.
func (r *runner) gatewayPhase(ctx context.Context, res *Result) (err error) {
	n := r.sizes.GatewayCalls
	r.logf("gateway: %d tools/calls from %d clients, direct to a local MCP server, then through the gateway in front of it", n, gatewayClients)
	if err := r.reset(ctx); err != nil {
		return err
	}
	ts, err := startToolServer()
	if err != nil {
		return err
	}
	defer ts.close()
	gwURL, stopDaemon, err := r.startGatewayDaemon(ctx, ts.url)
	if err != nil {
		return err
	}
	defer func() {
		if serr := stopDaemon(); serr != nil && err == nil {
			err = serr
		}
	}()

	direct, err := connectClients(ctx, ts.url)
	defer direct.close()
	if err != nil {
		return fmt.Errorf("gateway: connect to the tool server: %w", err)
	}
	through, err := connectClients(ctx, gwURL)
	defer through.close()
	if err != nil {
		return fmt.Errorf("gateway: connect to the gateway: %w", err)
	}
	r.runSeq++
	run := "bench-gw-" + strconv.Itoa(r.runSeq)
	// Warm-up: connections, the engine's and the adapter's first calls.
	if _, err := direct.calls(ctx, run, "warm", gatewayWarmup*gatewayClients, false); err != nil {
		return fmt.Errorf("gateway: direct warm-up: %w", err)
	}
	if _, err := through.calls(ctx, run, "warm", gatewayWarmup*gatewayClients, true); err != nil {
		return fmt.Errorf("gateway: warm-up through the gateway: %w", err)
	}
	var g gatewayResult
	if g.direct, err = direct.calls(ctx, run, "call", n, false); err != nil {
		return fmt.Errorf("gateway: direct calls: %w", err)
	}
	stopProfile, err := r.gatewayProfile()
	if err != nil {
		return err
	}
	g.through, err = through.calls(ctx, run, "call", n, true)
	if perr := stopProfile(); err == nil {
		err = perr
	}
	if err != nil {
		return fmt.Errorf("gateway: calls through the gateway: %w", err)
	}
	one := oneClientCalls(n)
	if g.oneDirect, err = direct.first().calls(ctx, run, "one", one, false); err != nil {
		return fmt.Errorf("gateway: direct calls from one client: %w", err)
	}
	if g.oneThrough, err = through.first().calls(ctx, run, "one", one, true); err != nil {
		return fmt.Errorf("gateway: calls through the gateway from one client: %w", err)
	}
	// Every call through the gateway reached the tool once: no call was
	// answered without its own dispatch.
	if want := int64(2 * (n + one + gatewayWarmup*gatewayClients)); ts.calls.Load() != want {
		return fmt.Errorf("gateway: the tool server answered %d calls, want %d (each call direct and through the gateway once)", ts.calls.Load(), want)
	}
	g.record(res, n)
	r.logf("gateway: p50 %.2f ms through the gateway − %.2f ms direct = %.2f ms; p99 %.2f ms − %.2f ms = %.2f ms",
		res.GatewayP50Ms, res.GatewayDirectP50Ms, res.GatewayOverheadP50Ms, res.GatewayP99Ms, res.GatewayDirectP99Ms, res.GatewayOverheadP99Ms)
	r.logf("gateway, one client: p50 %.2f ms through the gateway − %.2f ms direct = %.2f ms; p99 %.2f ms − %.2f ms = %.2f ms",
		res.GatewayOneP50Ms, res.GatewayOneDirectP50Ms, res.GatewayOneOverheadP50Ms, res.GatewayOneP99Ms, res.GatewayOneDirectP99Ms, res.GatewayOneOverheadP99Ms)
	return nil
}

// gatewayProfile starts the profilers for the calls through the gateway
// when a profile is asked for and the drain runs, which they otherwise
// cover, are not part of this run; the function returned stops them.
func (r *runner) gatewayProfile() (func() error, error) {
	if len(r.opts.Phases) == 0 || slices.Contains(r.opts.Phases, "drain") {
		return func() error { return nil }, nil
	}
	return r.startProfiles()
}

// record sets the phase's fields of res: each overhead is the percentile
// through the gateway minus the same percentile direct.
func (g gatewayResult) record(res *Result, n int) {
	res.GatewayCalls, res.GatewayClients = n, gatewayClients
	res.GatewayP50Ms, res.GatewayP99Ms = round(percentile(g.through, 50), 2), round(percentile(g.through, 99), 2)
	res.GatewayDirectP50Ms, res.GatewayDirectP99Ms = round(percentile(g.direct, 50), 2), round(percentile(g.direct, 99), 2)
	res.GatewayOverheadP50Ms = round(res.GatewayP50Ms-res.GatewayDirectP50Ms, 2)
	res.GatewayOverheadP99Ms = round(res.GatewayP99Ms-res.GatewayDirectP99Ms, 2)
	res.GatewayOneCalls = len(g.oneThrough)
	res.GatewayOneP50Ms, res.GatewayOneP99Ms = round(percentile(g.oneThrough, 50), 2), round(percentile(g.oneThrough, 99), 2)
	res.GatewayOneDirectP50Ms, res.GatewayOneDirectP99Ms = round(percentile(g.oneDirect, 50), 2), round(percentile(g.oneDirect, 99), 2)
	res.GatewayOneOverheadP50Ms = round(res.GatewayOneP50Ms-res.GatewayOneDirectP50Ms, 2)
	res.GatewayOneOverheadP99Ms = round(res.GatewayOneP99Ms-res.GatewayOneDirectP99Ms, 2)
}

// oneClientCalls is how many calls the one-client runs make each way: a
// quarter of the calls of the gatewayClients runs, at least one.
func oneClientCalls(n int) int {
	return max(1, n/4)
}

// startGatewayDaemon runs `drainer run` in this process on the bench's
// schema, configured from gatewayConfig around the tool server at toolURL,
// with its gateway on a loopback listener; it returns the gateway's URL
// once the engine runs and a function that stops the daemon.
func (r *runner) startGatewayDaemon(ctx context.Context, toolURL string) (string, func() error, error) {
	cfg, err := config.Parse("bench.yaml", fmt.Appendf(nil, gatewayConfig, toolURL), config.LoadOptions{})
	if err != nil {
		return "", nil, fmt.Errorf("bench gateway config: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("gateway listener: %w", err)
	}
	url := "http://" + ln.Addr().String() + gateway.Path
	dctx, cancel := context.WithCancel(ctx)
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(dctx, daemon.Options{
			Config: cfg, DatabaseURL: r.url, Schema: r.schema, Workers: r.opts.Workers,
			MetricsAddr: "127.0.0.1:0", GatewayListener: ln, ShutdownTimeout: 10 * time.Second, Version: r.opts.Version,
			Started: func(*drainer.Engine) { close(started) },
		})
	}()
	stop := func() error {
		cancel()
		if err := <-done; err != nil {
			return fmt.Errorf("gateway: drainer run: %w", err)
		}
		return nil
	}
	select {
	case <-started:
		return url, stop, nil
	case err := <-done:
		cancel()
		if err == nil {
			err = errors.New("stopped before its engine ran")
		}
		return "", nil, fmt.Errorf("gateway: drainer run: %w", err)
	case <-time.After(time.Minute):
		return "", nil, errors.Join(errors.New("gateway: drainer run did not start within a minute"), stop())
	}
}

// toolServer is the gateway phase's MCP server (the official Go SDK's,
// stateless, answering JSON): one tool that answers at once.
type toolServer struct {
	url   string
	srv   *http.Server
	wg    sync.WaitGroup
	calls atomic.Int64
}

func startToolServer() (*toolServer, error) {
	ts := &toolServer{}
	server := sdk.NewServer(&sdk.Implementation{Name: "bench-tools", Version: "1"}, nil)
	server.AddTool(&sdk.Tool{Name: gatewayTool, Description: "answers at once", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			ts.calls.Add(1)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "ok"}}}, nil
		})
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return server },
		&sdk.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("gateway tool server: %w", err)
	}
	ts.url = "http://" + ln.Addr().String()
	ts.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ts.wg.Go(func() { _ = ts.srv.Serve(ln) })
	return ts, nil
}

func (ts *toolServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = ts.srv.Shutdown(ctx)
	ts.wg.Wait()
}

// mcpClients are gatewayClients MCP client sessions to one endpoint, each
// with its own HTTP transport (so its own connection).
type mcpClients struct {
	sessions   []*sdk.ClientSession
	transports []*http.Transport
}

// connectClients connects gatewayClients sessions to url; close them even
// on an error.
func connectClients(ctx context.Context, url string) (*mcpClients, error) {
	cs := &mcpClients{}
	for i := range gatewayClients {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		cs.transports = append(cs.transports, tr)
		c := sdk.NewClient(&sdk.Implementation{Name: "bench-agent-" + strconv.Itoa(i+1), Version: "1"}, nil)
		s, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: tr}, MaxRetries: -1}, nil)
		if err != nil {
			return cs, err
		}
		cs.sessions = append(cs.sessions, s)
	}
	return cs, nil
}

// first is the first client alone (closed with cs).
func (cs *mcpClients) first() *mcpClients {
	return &mcpClients{sessions: cs.sessions[:1]}
}

func (cs *mcpClients) close() {
	for _, s := range cs.sessions {
		_ = s.Close()
	}
	for _, tr := range cs.transports {
		tr.CloseIdleConnections()
	}
}

// calls makes n tools/calls of gatewayTool, call i by client i mod
// gatewayClients, each client one call at a time, and returns each call's
// time in ms, sorted. Call i is step prefix-i of its client's run, with
// its own arguments: through the gateway, each records a row of its own
// (an answer that is a replay is an error).
func (cs *mcpClients) calls(ctx context.Context, run, prefix string, n int, viaGateway bool) ([]float64, error) {
	times := make([]float64, n)
	errs := make([]error, len(cs.sessions))
	var wg sync.WaitGroup
	for c, s := range cs.sessions {
		wg.Go(func() {
			for i := c; i < n; i += len(cs.sessions) {
				params := &sdk.CallToolParams{Name: gatewayTool, Arguments: map[string]any{"n": i},
					Meta: sdk.Meta{gateway.MetaAgentRunID: run + "-c" + strconv.Itoa(c+1), gateway.MetaStepID: prefix + "-" + strconv.Itoa(i)}}
				begin := time.Now()
				res, err := s.CallTool(ctx, params)
				times[i] = ms(time.Since(begin))
				if err == nil && res.IsError {
					err = fmt.Errorf("isError: %s", resultText(res))
				}
				if err == nil && viaGateway && res.Meta[gateway.MetaReplay] != nil {
					err = errors.New("answered as a replay: the call did not record a row of its own")
				}
				if err != nil {
					errs[c] = fmt.Errorf("call %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	slices.Sort(times)
	return times, nil
}

// resultText is a result's text content, for an error message.
func resultText(res *sdk.CallToolResult) string {
	b, err := json.Marshal(res.Content)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
