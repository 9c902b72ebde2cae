package drainer

import (
	"slices"
	"strings"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/prometheus/client_golang/prometheus"
)

// AdapterState says whether one adapter can send now. An adapter that is
// not ready (breaker open, credentials refused on several routes) holds
// back its own rows only: the others drain, so the daemon stays ready and
// /readyz names it.
type AdapterState struct {
	Adapter string
	Ready   bool
	// Reason says why it is not ready.
	Reason string
	// Holds lists its auth holds, by route; Route "*" is the whole adapter.
	Holds []Hold
	// Routes lists the routes (tools) sending to it, sorted.
	Routes []string
}

// Hold is one auth hold under way.
type Hold struct {
	Route string
	Since time.Time
}

// readier is an adapter that connects in the background (mcp, kafka): not ready
// until its provider answered once.
type readier interface{ Ready() bool }

// notReadyReasoner is an adapter that says why it is not ready.
type notReadyReasoner interface{ NotReadyReason() string }

// AdapterStates reports every adapter of the routing in force, by name.
func (e *Engine) AdapterStates() []AdapterState {
	e.gatesMu.Lock()
	gates := make([]*gate, 0, len(e.gates))
	for _, g := range e.gates {
		gates = append(gates, g)
	}
	e.gatesMu.Unlock()
	now := time.Now()
	var reg *dispatch.Registry
	if rt := e.routing.Load(); rt != nil {
		reg = rt.Registry
	}
	out := make([]AdapterState, 0, len(gates))
	for _, g := range gates {
		st := g.status(now)
		if entry, ok := reg.Get(g.name); reg != nil && ok && st.Ready {
			if r, ok := entry.Adapter.(readier); ok && !r.Ready() {
				st.Ready, st.Reason = false, "connecting: its provider has not been reachable since startup"
				if w, ok := entry.Adapter.(notReadyReasoner); ok {
					st.Reason = "connecting: " + w.NotReadyReason()
				}
			}
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b AdapterState) int { return strings.Compare(a.Adapter, b.Adapter) })
	return out
}

// adapterCollector exports drainer_adapter_ready and drainer_hold_seconds,
// read from the gates at each scrape (a hold's age grows between events).
// drainer_hold_seconds has a series for every route of every adapter and
// for the whole adapter (route "*"), 0 while it is not held, so dashboards
// show 0 rather than no data (a hold is never 0 s old once it began).
type adapterCollector struct {
	states func() []AdapterState
	ready  *prometheus.Desc
	hold   *prometheus.Desc
}

func newAdapterCollector(states func() []AdapterState) *adapterCollector {
	return &adapterCollector{
		states: states,
		ready: prometheus.NewDesc("drainer_adapter_ready",
			"1 when the adapter can send, 0 while its circuit breaker is open (or half-open) or it is held after refusing the credentials on several routes; its rows wait, other adapters drain.",
			[]string{"adapter"}, nil),
		hold: prometheus.NewDesc("drainer_hold_seconds",
			"Age of the auth hold under way (the provider refused the credentials), by adapter and route; route \"*\" is a hold of the whole adapter; 0 = not held.",
			[]string{"adapter", "route"}, nil),
	}
}

func (c *adapterCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.ready
	ch <- c.hold
}

func (c *adapterCollector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	for _, st := range c.states() {
		ready := 0.0
		if st.Ready {
			ready = 1
		}
		ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, ready, st.Adapter)
		held := make(map[string]bool, len(st.Holds))
		for _, h := range st.Holds {
			held[h.Route] = true
			ch <- prometheus.MustNewConstMetric(c.hold, prometheus.GaugeValue, now.Sub(h.Since).Seconds(), st.Adapter, h.Route)
		}
		for _, r := range append([]string{wholeAdapter}, st.Routes...) {
			if !held[r] {
				held[r] = true
				ch <- prometheus.MustNewConstMetric(c.hold, prometheus.GaugeValue, 0, st.Adapter, r)
			}
		}
	}
}
