package daemon

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/mcp"
	"github.com/drainer-io/drainer/drainer"
	"github.com/drainer-io/drainer/gateway"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// listenGateway takes the MCP gateway's address (--gateway-addr, else
// gateway.addr), or returns nil when there is no gateway. An address off
// loopback without gateway.token, or a taken one, is refused at once.
func (d *daemonRun) listenGateway() (net.Listener, error) {
	g := d.st.cfg.Gateway
	if ln := d.opts.GatewayListener; ln != nil {
		if err := config.RequireGatewayToken(ln.Addr().String(), g.Token.Reveal() != ""); err != nil {
			_ = ln.Close()
			return nil, &ConfigError{fmt.Errorf("gateway: %w", err)}
		}
		d.onCleanup(func() { _ = ln.Close() })
		return ln, nil
	}
	addr := cmp.Or(d.opts.GatewayAddr, g.Addr)
	if addr == "" {
		return nil, nil
	}
	if err := config.RequireGatewayToken(addr, g.Token.Reveal() != ""); err != nil {
		from := "gateway.addr"
		if d.opts.GatewayAddr != "" {
			from = "--gateway-addr" // or DRAINER_GATEWAY_ADDR
		}
		return nil, &ConfigError{fmt.Errorf("%s: %w", from, err)}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &ConfigError{fmt.Errorf("gateway: listen on %s: %w", addr, err)}
	}
	d.onCleanup(func() { _ = ln.Close() })
	return ln, nil
}

// startGateway serves the gateway on ln (nothing when ln is nil) once the
// engine runs: its tools are the routed tools of the config's mcp adapters.
// A server unreachable now has its tools listed once it answers. The
// gateway leases its calls' rows to eng as it records them (Engine.Lease) and is stored in
// served, which eng's completions tell (Config.Settled).
func (d *daemonRun) startGateway(ctx context.Context, ln net.Listener, pool *pgxpool.Pool, reg *dispatch.Registry,
	eng *drainer.Engine, served *atomic.Pointer[gateway.Gateway]) error {
	if ln == nil {
		return nil
	}
	st, err := store.New(d.st.schema)
	if err != nil {
		return &ConfigError{err}
	}
	servers := gatewayServers(d.st.cfg, reg)
	tools, pending, err := listGatewayTools(ctx, servers, d.log)
	if err != nil {
		return &ConfigError{err}
	}
	g := d.st.cfg.Gateway
	cc := pool.Config().ConnConfig
	gw, err := gateway.New(gateway.Config{
		Listener: ln, Token: g.Token.Reveal(), Wait: g.Wait, AbortTool: g.AbortTool, MaxCalls: gatewayMaxCalls(d.st.workers),
		DB: pool, Store: st, Tools: tools, Metrics: d.gatewayMetrics, Logger: d.log, Version: d.opts.Version,
		Lease: eng.Lease, Writing: eng.Writing, Admit: eng.Admit, Routed: eng.Routed,
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			c := cc.Copy()
			c.RuntimeParams["application_name"] = "drainer gateway"
			return pgx.ConnectConfig(ctx, c)
		},
	})
	if err != nil {
		return &ConfigError{err}
	}
	for _, s := range pending {
		awaited := map[string]string{}
		for tool := range s.routes {
			awaited[tool] = s.adapter
		}
		gw.Await(awaited)
	}
	served.Store(gw)
	d.gateway = gw
	if err := gw.Serve(ctx); err != nil {
		return err
	}
	lctx, stopListing := context.WithCancel(context.WithoutCancel(ctx))
	for _, s := range pending {
		go listLater(lctx, s, gw, d.log)
	}
	d.stopGateway = func() {
		stopListing()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = gw.Shutdown(sctx)
	}
	d.onCleanup(d.stopGateway)
	return nil
}

// gatewayMaxCalls is how many tools/call the gateway serves at once: twice
// the engine's workers, at least gateway.DefaultMaxCalls (512 with the
// default 256 workers). The engine sends at most workers rows at once, so
// this leaves room for the calls waiting on those, the calls joining one
// in flight and the read-only calls passed straight through, while bounding
// what the calls in progress hold (each its request, up to 1 MiB of
// arguments, and its answer) as workers bounds the engine's.
func gatewayMaxCalls(workers int) int { return max(gateway.DefaultMaxCalls, 2*workers) }

// gatewayToolNames are the tools the gateway may serve: the routes of the
// config's mcp adapters, plus drainer_abort_run when it is listed.
func gatewayToolNames(cfg *config.Config) []string {
	var names []string
	for _, tool := range slices.Sorted(maps.Keys(cfg.Routes)) {
		if a := cfg.Adapters[cfg.Routes[tool].Adapter]; a != nil && a.Type == mcpType {
			names = append(names, tool)
		}
	}
	if cfg.Gateway.AbortTool {
		names = append(names, gateway.AbortToolName)
	}
	return names
}

// gatewayServer is one mcp adapter with routes, and the routes.
type gatewayServer struct {
	adapter string
	entry   *dispatch.Entry
	lister  interface {
		ListTools(context.Context) ([]mcp.Tool, error)
	}
	routes map[string]*config.Route // by tool
}

// gatewayServers returns the mcp adapters that have routes, by name.
func gatewayServers(cfg *config.Config, reg *dispatch.Registry) []*gatewayServer {
	byName := map[string]*gatewayServer{}
	for tool, r := range cfg.Routes {
		a := cfg.Adapters[r.Adapter]
		if a == nil || a.Type != mcpType {
			continue
		}
		s := byName[r.Adapter]
		if s == nil {
			entry, ok := reg.Get(r.Adapter)
			if !ok {
				continue
			}
			lister, ok := entry.Adapter.(interface {
				ListTools(context.Context) ([]mcp.Tool, error)
			})
			if !ok {
				continue
			}
			s = &gatewayServer{adapter: r.Adapter, entry: entry, lister: lister, routes: map[string]*config.Route{}}
			byName[r.Adapter] = s
		}
		s.routes[tool] = r
	}
	out := make([]*gatewayServer, 0, len(byName))
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		out = append(out, byName[name])
	}
	return out
}

// listGatewayTools reads each server's tools/list: the tools of the
// reachable ones, and the servers to list later. A routed tool whose name
// another of these servers also offers is an error: an agent calling it
// could mean either.
func listGatewayTools(ctx context.Context, servers []*gatewayServer, log *slog.Logger) ([]gateway.Tool, []*gatewayServer, error) {
	offered := map[string][]string{} // tool → servers offering it
	listed := map[*gatewayServer][]mcp.Tool{}
	var pending []*gatewayServer
	for _, s := range servers {
		lctx, cancel := context.WithTimeout(ctx, cmp.Or(s.entry.Timeout, 10*time.Second))
		tools, err := s.lister.ListTools(lctx)
		cancel()
		if err != nil {
			log.Warn("gateway: an MCP server is not reachable yet; its tools are listed once it answers",
				"adapter", s.adapter, "err", err)
			pending = append(pending, s)
			continue
		}
		listed[s] = tools
		for _, t := range tools {
			offered[t.Name] = append(offered[t.Name], s.adapter)
		}
	}
	var out []gateway.Tool
	var conflicts []string
	for _, s := range servers {
		for _, t := range listed[s] {
			if s.routes[t.Name] == nil {
				continue
			}
			if others := offered[t.Name]; len(others) > 1 {
				conflicts = append(conflicts, fmt.Sprintf("tool %s is offered by the mcp adapters %s", t.Name, strings.Join(others, " and ")))
				continue
			}
			out = append(out, gatewayTool(s, t))
		}
	}
	if len(conflicts) > 0 {
		return nil, nil, fmt.Errorf("gateway: %s: an agent calling it could mean either server; rename the tool on one of them, or route only one server's tools",
			strings.Join(conflicts, "; "))
	}
	return out, pending, nil
}

// gatewayTool is the gateway's tool t of server s.
func gatewayTool(s *gatewayServer, t mcp.Tool) gateway.Tool {
	r := s.routes[t.Name]
	var oversized func(string) (json.RawMessage, bool)
	if o, ok := s.entry.Adapter.(interface {
		Oversized(string) (json.RawMessage, bool)
	}); ok {
		oversized = o.Oversized
	}
	readOnly := t.Annotations != nil && t.Annotations.ReadOnlyHint != nil && *t.Annotations.ReadOnlyHint
	return gateway.Tool{
		Name: t.Name, Adapter: s.adapter, Definition: t.Definition,
		Passthrough: r.Class == outbox.ClassNaturallyIdempotent && readOnly,
		Send:        s.entry.Adapter.Dispatch,
		Oversized:   oversized,
	}
}

// listLater lists a server unreachable at startup until it answers, then
// adds its routed tools.
func listLater(ctx context.Context, s *gatewayServer, gw *gateway.Gateway, log *slog.Logger) {
	for delay := time.Second; ; delay = min(2*delay, 30*time.Second) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		lctx, cancel := context.WithTimeout(ctx, cmp.Or(s.entry.Timeout, 10*time.Second))
		tools, err := s.lister.ListTools(lctx)
		cancel()
		if err != nil {
			continue
		}
		var add []gateway.Tool
		for _, t := range tools {
			if s.routes[t.Name] != nil {
				add = append(add, gatewayTool(s, t))
			}
		}
		if err := gw.AddTools(add...); err != nil {
			log.Error("gateway: tools of an MCP server could not be listed", "adapter", s.adapter, "err", err)
		}
		gw.Answered(s.adapter)
		log.Info("gateway: an MCP server answered; its tools are listed", "adapter", s.adapter, "tools", len(add))
		return
	}
}
