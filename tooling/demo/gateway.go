package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/drainer"
	"github.com/drainer-io/drainer/gateway"
	"github.com/drainer-io/drainer/internal/daemon"
	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/store"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
)

// chargeTime is how long the mock tool server's charge_card takes: long
// enough for the harness to cut the call while the tool works.
const chargeTime = 300 * time.Millisecond

// gatewayRun is the agent run of the gateway demo.
const gatewayRun = "agent-run-7"

// gatewayConfigTemplate is the gateway demo's config: one mcp adapter (the
// mock tool server, %[2]s) whose charge_card route the gateway serves.
const gatewayConfigTemplate = `# The gateway demo's config: one MCP tool server behind the gateway.
workers: %[1]d
lease: 20s
adapters:
  tools:
    type: mcp
    url: %[2]s
    timeout: 5s
routes:
  charge_card:
    adapter: tools
    class: key_idempotent
gateway:
  wait: 30s
`

// RunGateway runs `drainer demo --gateway`: a throwaway Postgres, a mock
// MCP tool server whose charge_card takes chargeTime and counts its effects
// per idempotency key, and `drainer run` with its MCP gateway in front of
// it. An agent (the official Go SDK's client) calls charge_card through
// the gateway; the harness cuts the call while the tool works and re-sends
// it under a new request id, then once more. The summary shows one
// effect upstream; any other count is an error.
func RunGateway(ctx context.Context, opts Options) error {
	if opts.Workers == 0 {
		opts.Workers = 4
	}
	closeLog, err := openLog(&opts, "drainer-demo-gateway.log")
	if err != nil {
		return err
	}
	defer closeLog()
	out := opts.Out
	fmt.Fprintf(out, "drainer demo --gateway: a throwaway Postgres, a mock MCP tool server (charge_card takes %s) and drainer run with its MCP gateway in front of it\n", chargeTime)

	tools, err := startChargeServer()
	if err != nil {
		return err
	}
	defer tools.close()
	cfg, err := config.Parse("demo.yaml", fmt.Appendf(nil, gatewayConfigTemplate, opts.Workers, tools.url), config.LoadOptions{})
	if err != nil {
		return fmt.Errorf("demo config: %w", err)
	}
	pg, err := startPostgres(ctx, opts.Logger)
	if err != nil {
		return err
	}
	defer pg.stop()
	pool, err := migratedPool(ctx, pg.url)
	if err != nil {
		return err
	}
	defer pool.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("gateway listener: %w", err)
	}
	gatewayURL := "http://" + ln.Addr().String() + gateway.Path
	reg := prometheus.NewRegistry()
	runCtx, stopDaemon := context.WithCancel(ctx)
	defer stopDaemon()
	started := make(chan struct{})
	daemonErr := make(chan error, 1)
	go func() {
		daemonErr <- daemon.Run(runCtx, daemon.Options{
			Config: cfg, DatabaseURL: pg.url, Schema: migrations.DefaultSchema, MetricsAddr: "127.0.0.1:0",
			GatewayListener: ln, ShutdownTimeout: 5 * time.Second, Logger: opts.Logger, Version: opts.Version, Registry: reg,
			Started: func(*drainer.Engine) { close(started) },
		})
	}()
	select {
	case <-started:
	case err := <-daemonErr:
		if err == nil {
			err = errors.New("stopped before its engine ran")
		}
		return fmt.Errorf("daemon: %w", err)
	case <-time.After(time.Minute):
		return errors.New("daemon: not started within a minute")
	case <-ctx.Done():
		return ctx.Err()
	}
	fmt.Fprintf(out, "gateway serving MCP at %s; the tool server at %s\n\n", gatewayURL, tools.url)

	h, err := runHarness(ctx, out, gatewayURL, pool, tools)
	stopDaemon()
	if derr := <-daemonErr; derr != nil && err == nil {
		err = fmt.Errorf("daemon: %w", derr)
	}
	if err != nil {
		return err
	}
	return gatewaySummary(out, h, tools, reg)
}

// harness is what the harness saw of its three sends of one call.
type harness struct {
	key               string
	recordedBeforeCut bool
	answers           []*sdk.CallToolResult // of the second and third send
}

// runHarness plays the agent and its harness: the agent calls charge_card
// through the gateway; the harness cuts the call once the tool is at work
// and re-sends it under a new request id, then once more.
func runHarness(ctx context.Context, out io.Writer, url string, pool store.DB, tools *chargeServer) (*harness, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: headerTransport{base: tr, run: gatewayRun}}
	client := sdk.NewClient(&sdk.Implementation{Name: "demo-agent", Version: "1"}, nil)
	session, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		return nil, fmt.Errorf("agent: connect to the gateway: %w", err)
	}
	defer session.Close()
	params := &sdk.CallToolParams{Name: "charge_card", Arguments: map[string]any{"card": "card_4242", "amount": 500, "currency": "eur"}}
	fmt.Fprintf(out, "agent (run %s, header %s): tools/call charge_card {\"amount\": 500, \"currency\": \"eur\", \"card\": \"card_4242\"}\n",
		gatewayRun, gateway.HeaderAgentRunID)

	// Send 1, cut by the harness while the tool works.
	cctx, cut := context.WithCancel(ctx)
	first := make(chan error, 1)
	go func() {
		_, err := session.CallTool(cctx, params)
		first <- err
	}()
	select {
	case <-tools.working:
	case err := <-first:
		cut()
		return nil, fmt.Errorf("send 1 was answered before the tool was at work: %v", err)
	case <-time.After(30 * time.Second):
		cut()
		return nil, errors.New("the tool server was not called within 30s of send 1")
	}
	cut()
	if err := <-first; err == nil {
		return nil, errors.New("send 1 was answered although the harness cut it")
	}
	fmt.Fprintf(out, "send 1: cut by the harness while the tool was at work (the connection closed; no answer)\n")

	h := &harness{}
	st := store.MustNew(migrations.DefaultSchema)
	rows, err := st.RunRows(ctx, pool, gatewayRun, 10)
	if err != nil {
		return nil, err
	}
	if len(rows) == 1 {
		h.key, h.recordedBeforeCut = rows[0].Key, true
		fmt.Fprintf(out, "        its row was recorded before the tool was called: key %s, status %s\n", rows[0].Key, rows[0].Status)
	}

	for i := 2; i <= 3; i++ {
		res, err := session.CallTool(ctx, params)
		if err != nil {
			return nil, fmt.Errorf("send %d: %w", i, err)
		}
		if res.IsError {
			return nil, fmt.Errorf("send %d answered isError: %s", i, text(res))
		}
		key, _ := res.Meta[gateway.MetaKey].(string)
		if h.key == "" {
			h.key = key
		}
		if key != h.key {
			return nil, fmt.Errorf("send %d was answered for key %s, not %s", i, key, h.key)
		}
		h.answers = append(h.answers, res)
		fmt.Fprintf(out, "send %d: the same call under a new request id: %s: %s\n", i, kind(res), text(res))
	}
	return h, nil
}

// gatewaySummary prints the key, each answer and the effects upstream; an
// effect count other than one is an error.
func gatewaySummary(out io.Writer, h *harness, tools *chargeServer, reg prometheus.Gatherer) error {
	requests, effects, keyEffects := tools.counts(h.key)
	fmt.Fprintf(out, "\nkey: %s\n", h.key)
	first := "cut mid-call, no answer"
	if h.recordedBeforeCut {
		first += " (its call recorded the row: created)"
	}
	fmt.Fprintf(out, "  send 1: %s\n", first)
	for i, res := range h.answers {
		fmt.Fprintf(out, "  send %d: %s: %s\n", i+2, kind(res), text(res))
	}
	if outcomes, err := gatewayOutcomes(reg); err == nil {
		fmt.Fprintf(out, "gateway answers (drainer_gateway_calls_total by outcome): %s\n", outcomes)
	}
	fmt.Fprintf(out, "upstream requests: %d\n", requests)
	fmt.Fprintf(out, "upstream effects: %d\n", effects)
	if effects != 1 || keyEffects != 1 {
		return fmt.Errorf("the tool server charged %d times, %d of them for key %s; want once", effects, keyEffects, h.key)
	}
	return nil
}

// kind is how the gateway answered: a replay of the recorded call, or the
// answer of the call that created the row.
func kind(res *sdk.CallToolResult) string {
	if res.Meta[gateway.MetaReplay] == true {
		return "replay"
	}
	return "created"
}

// text is a result's text content.
func text(res *sdk.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if t, ok := c.(*sdk.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	return fmt.Sprintf("%q", strings.Join(parts, " "))
}

// gatewayOutcomes reads drainer_gateway_calls_total's non-zero series.
func gatewayOutcomes(reg prometheus.Gatherer) (string, error) {
	families, err := reg.Gather()
	if err != nil {
		return "", err
	}
	var parts []string
	for _, f := range families {
		if f.GetName() != "drainer_gateway_calls_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if n := m.GetCounter().GetValue(); n > 0 {
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" {
						parts = append(parts, fmt.Sprintf("%s %.0f", l.GetValue(), n))
					}
				}
			}
		}
	}
	return strings.Join(parts, ", "), nil
}

// headerTransport names the agent's run on every request.
type headerTransport struct {
	base http.RoundTripper
	run  string
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(gateway.HeaderAgentRunID, t.run)
	return t.base.RoundTrip(r)
}

// chargeServer is the mock MCP tool server (the official Go SDK's): its
// charge_card takes chargeTime and charges on every request it gets,
// counting requests and effects per idempotency key, so that a second
// request for one call would show as a second effect.
type chargeServer struct {
	url     string
	srv     *http.Server
	wg      sync.WaitGroup
	working chan struct{} // closed when charge_card is first at work

	mu       sync.Mutex
	once     sync.Once
	requests map[string]int
	effects  map[string]int
	charges  int
}

func startChargeServer() (*chargeServer, error) {
	cs := &chargeServer{working: make(chan struct{}), requests: map[string]int{}, effects: map[string]int{}}
	server := sdk.NewServer(&sdk.Implementation{Name: "demo-payments", Version: "1"}, nil)
	destructive := true
	server.AddTool(&sdk.Tool{Name: "charge_card", Description: "Charges a card (takes " + chargeTime.String() + ")",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"card":{"type":"string"},"amount":{"type":"integer"},"currency":{"type":"string"}}}`),
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &destructive}}, cs.charge)
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return server },
		&sdk.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("mock tool server: %w", err)
	}
	cs.url = "http://" + ln.Addr().String() + "/mcp"
	cs.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	cs.wg.Go(func() { _ = cs.srv.Serve(ln) })
	return cs, nil
}

func (cs *chargeServer) charge(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	key, _ := req.Params.Meta["io.drainer/idempotency-key"].(string)
	cs.mu.Lock()
	cs.requests[key]++
	cs.mu.Unlock()
	cs.once.Do(func() { close(cs.working) })
	select {
	case <-time.After(chargeTime):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var args struct {
		Card     string `json:"card"`
		Amount   int    `json:"amount"`
		Currency string `json:"currency"`
	}
	if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
		return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "bad arguments: " + err.Error()}}}, nil
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.effects[key]++
	cs.charges++
	id := fmt.Sprintf("ch_%06d", cs.charges)
	return &sdk.CallToolResult{
		Content:           []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("charged %d %s to %s (%s)", args.Amount, args.Currency, args.Card, id)}},
		StructuredContent: map[string]any{"charge_id": id, "amount": args.Amount, "currency": args.Currency},
	}, nil
}

// counts returns every request and effect the server saw, and the effects
// of key.
func (cs *chargeServer) counts(key string) (requests, effects, keyEffects int) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, n := range cs.requests {
		requests += n
	}
	return requests, cs.charges, cs.effects[key]
}

func (cs *chargeServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = cs.srv.Shutdown(ctx)
	cs.wg.Wait()
}
