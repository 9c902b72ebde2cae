package daemon

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/drainer"
	"github.com/drainer-io/drainer/internal/console"
	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// consoleDatabase names the one database the console shows until a fleet
// of databases is configured.
const consoleDatabase = "default"

// listenConsole takes the console's address (--console-addr, else
// console.addr), or returns nil when there is no console. A taken address
// is a ConfigError naming it.
func (d *daemonRun) listenConsole() (net.Listener, error) {
	addr := cmp.Or(d.opts.ConsoleAddr, d.st.cfg.Console.Addr)
	if addr == "" {
		return nil, nil
	}
	ln, err := console.Listen(addr)
	if err != nil {
		return nil, &ConfigError{fmt.Errorf("%s: %w", consoleAddrFrom(d.opts.ConsoleAddr), err)}
	}
	if w := config.ConsoleExposure(addr); w != "" && d.opts.ConsoleAddr != "" {
		d.log.Warn("--console-addr " + w) // the config's own address is warned of at load
	}
	d.onCleanup(func() { _ = ln.Close() })
	return ln, nil
}

// startConsole serves the console on ln (nothing when ln is nil) for
// eng's database.
func (d *daemonRun) startConsole(ctx context.Context, ln net.Listener, pool *pgxpool.Pool, eng *drainer.Engine, reg *prometheus.Registry) error {
	if ln == nil {
		return nil
	}
	st, err := store.New(d.st.schema)
	if err != nil {
		return &ConfigError{err}
	}
	c := d.st.cfg.Console
	srv, err := console.New(console.Config{
		Addr: ln.Addr().String(), Listener: ln, Actions: c.Actions, Token: c.Token.Reveal(),
		Databases: []console.Database{{Name: consoleDatabase, DB: pool, Store: st}},
		Adapters: func() []drainer.AdapterState {
			if eng := d.engine.Load(); eng != nil {
				return eng.AdapterStates()
			}
			return nil
		},
		Routed: func() []string {
			if eng := d.engine.Load(); eng != nil {
				if rt := eng.Routing(); rt != nil {
					return rt.RoutedTools()
				}
			}
			return nil
		},
		// The routes and adapters of the routing in force (a reload
		// swaps it): a pause naming another is refused.
		Names: func() (routes, adapters []string) {
			rt := eng.Routing()
			return rt.RoutedTools(), rt.Registry.Names()
		},
		Gatherer: reg, SampleEvery: d.opts.ConsoleSampleEvery, Logger: d.log,
	})
	if err != nil {
		return &ConfigError{err}
	}
	if err := srv.Start(ctx); err != nil {
		return &ConfigError{err}
	}
	d.onCleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	d.log.Info("console serving", "console_addr", srv.Addr(), "actions", c.Actions)
	return nil
}

// consoleAddrFrom names where the console's address came from: the flag
// (or DRAINER_CONSOLE_ADDR) when flag is set, else the config's key.
func consoleAddrFrom(flag string) string {
	if flag != "" {
		return "--console-addr"
	}
	return "console.addr"
}
