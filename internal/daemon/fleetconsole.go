package daemon

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/drainer"
	"github.com/drainer-io/drainer/internal/console"
	"github.com/drainer-io/drainer/internal/fleet"
	"github.com/drainer-io/drainer/store"
	"github.com/prometheus/client_golang/prometheus"
)

// fleetRouting is the routing a fleet's engines run on, for its console:
// built from the config in force and its adapters, set at start and by
// each reload. No engine uses it (they each have their own over the same
// adapters); the console reads the routes, the adapters' names and
// whether each adapter can reach its provider.
type fleetRouting struct {
	rt atomic.Pointer[drainer.Routing]
}

func (f *fleetRouting) set(cfg *config.Config, reg *dispatch.Registry) {
	f.rt.Store(NewRouting(cfg, reg))
}

// routed is the tools the routing in force names.
func (f *fleetRouting) routed() []string { return f.rt.Load().RoutedTools() }

// names is the routes and adapters a pause may name.
func (f *fleetRouting) names() (routes, adapters []string) {
	rt := f.rt.Load()
	return rt.RoutedTools(), rt.Registry.Names()
}

// connecting says why an adapter that connects in the background (mcp,
// kafka, …) cannot send yet, as drainer.Engine.AdapterStates says it, or
// "" when it can or does not connect so.
func (f *fleetRouting) connecting(adapter string) string {
	e, ok := f.rt.Load().Registry.Get(adapter)
	if !ok {
		return ""
	}
	r, ok := e.Adapter.(interface{ Ready() bool })
	if !ok || r.Ready() {
		return ""
	}
	if w, ok := e.Adapter.(interface{ NotReadyReason() string }); ok {
		return "connecting: " + w.NotReadyReason()
	}
	return "connecting: its provider has not been reachable since startup"
}

// Breaker states of drainer_circuit_breaker_state.
const (
	breakerHalfOpen = 1
	breakerOpen     = 2
)

// wholeAdapter is the route of drainer_hold_seconds that holds the whole
// adapter.
const wholeAdapter = "*"

// engineAdapters returns the breakers, holds and readiness of every
// engine of this replica, by the database it drains, as its metrics show
// them (each engine's carry its database label): drainer_adapter_ready,
// drainer_hold_seconds (a hold's age; 0: not held) and
// drainer_circuit_breaker_state. A database whose engine does not run here
// (draining) is left out. Why an adapter is not ready is said as the
// engine says it: its breaker, an auth hold of the whole adapter, or its
// provider not reached yet (connecting).
func engineAdapters(g prometheus.Gatherer, draining []string, connecting func(adapter string) string, now time.Time) map[string][]drainer.AdapterState {
	out := make(map[string][]drainer.AdapterState, len(draining))
	for _, db := range draining {
		out[db] = []drainer.AdapterState{}
	}
	mfs, err := g.Gather()
	if err != nil {
		return out
	}
	type key struct{ db, adapter string }
	states := map[key]*drainer.AdapterState{}
	breakers := map[key]float64{}
	holds := map[key][]drainer.Hold{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			k := key{l["database"], l["adapter"]}
			if _, ok := out[k.db]; !ok || k.adapter == "" {
				continue
			}
			v := m.GetGauge().GetValue()
			switch mf.GetName() {
			case "drainer_adapter_ready":
				states[k] = &drainer.AdapterState{Adapter: k.adapter, Ready: v == 1}
			case "drainer_hold_seconds":
				if v > 0 {
					holds[k] = append(holds[k], drainer.Hold{Route: l["route"], Since: now.Add(-time.Duration(v * float64(time.Second)))})
				}
			case "drainer_circuit_breaker_state":
				breakers[k] = v
			}
		}
	}
	for k, st := range states {
		st.Holds = holds[k]
		slices.SortFunc(st.Holds, func(a, b drainer.Hold) int { return strings.Compare(a.Route, b.Route) })
		st.Reason = notReadyReason(st, breakers[k], connecting)
		out[k.db] = append(out[k.db], *st)
	}
	for db := range out {
		slices.SortFunc(out[db], func(a, b drainer.AdapterState) int { return strings.Compare(a.Adapter, b.Adapter) })
	}
	return out
}

// notReadyReason says why st cannot send, in the engine's words
// (drainer.Engine.AdapterStates): "" when it can.
func notReadyReason(st *drainer.AdapterState, breaker float64, connecting func(adapter string) string) string {
	if st.Ready {
		return ""
	}
	switch {
	case breaker == breakerOpen:
		return "circuit breaker open"
	case breaker == breakerHalfOpen:
		return "circuit breaker half-open"
	case slices.ContainsFunc(st.Holds, func(h drainer.Hold) bool { return h.Route == wholeAdapter }):
		return "credentials refused on several routes (auth hold)"
	}
	if why := connecting(st.Adapter); why != "" {
		return why
	}
	return "not ready"
}

// startFleetConsole serves the console of the fleet on ln: its overview
// from the backlogs the replicas publish in the coordination database, as
// this replica's heartbeat reads them back (fleet.Backlogs: no connection
// of the console's), one database's pages through a pool of one connection
// opened on use and closed when idle (fleet.Pool), so the console adds no
// connection while nobody uses it. Each database's breakers and holds are
// those of its engine on this replica (read from the engines' metrics),
// and the routes and adapters those of the config in force (rt).
func startFleetConsole(ctx context.Context, ln net.Listener, st settings, opts Options, f *fleet.Fleet, rt *fleetRouting,
	reg prometheus.Gatherer, log *slog.Logger) (stop func(), err error) {
	sto, err := store.New(st.schema)
	if err != nil {
		return nil, &ConfigError{err}
	}
	c := st.cfg.Console
	srv, err := console.New(console.Config{
		Addr: ln.Addr().String(), Listener: ln, Actions: c.Actions, Token: c.Token.Reveal(),
		Fleet: f, Store: sto, Gatherer: reg, SampleEvery: opts.ConsoleSampleEvery, Logger: log,
		EngineAdapters: func() map[string][]drainer.AdapterState {
			return engineAdapters(reg, f.Draining(), rt.connecting, time.Now())
		},
		Routed: rt.routed,
		Names:  rt.names,
	})
	if err != nil {
		return nil, &ConfigError{err}
	}
	if err := srv.Start(ctx); err != nil {
		return nil, &ConfigError{err}
	}
	log.Info("console serving", "console_addr", srv.Addr(), "actions", c.Actions, "databases", "fleet")
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}
