package fleet

import (
	"github.com/drainer-io/drainer/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Database states counted by drainer_fleet_databases.
const (
	stateKnown          = "known"
	stateOwned          = "owned"
	stateWaiting        = "waiting"
	stateUnreachable    = "unreachable"
	stateSchemaMismatch = "schema_mismatch"
)

// A database's state at the replica holding it (entry.state), as
// fleet_databases publishes it: starting, running, unreachable or
// schema_mismatch; stopping while it is let go, released once its pool has
// closed.
const (
	stateStarting = "starting"
	stateRunning  = "running"
	stateStopping = store.FleetStopping
	stateReleased = store.FleetReleased
)

// Reasons counted by drainer_fleet_database_errors_total.
const (
	reasonUnreachable    = "unreachable"
	reasonSchemaMismatch = "schema_mismatch"
	reasonStartTimeout   = "start_timeout"
	reasonStop           = "stop"
)

// reasons are every reason, each database's series initialised at 0.
var reasons = []string{reasonUnreachable, reasonSchemaMismatch, reasonStartTimeout, reasonStop}

// metrics are the fleet's own collectors, beside each database's engine
// metrics (which carry the database label).
type metrics struct {
	members        prometheus.Gauge
	expiries       prometheus.Counter
	databases      *prometheus.GaugeVec
	dbErrors       *prometheus.CounterVec
	catalogErrors  prometheus.Counter
	coordErrors    prometheus.Counter
	handoversTotal *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		members: f.NewGauge(prometheus.GaugeOpts{
			Name: "drainer_fleet_members",
			Help: "Live replicas of the fleet, as this replica saw them at its last heartbeat.",
		}),
		expiries: f.NewCounter(prometheus.CounterOpts{
			Name: "drainer_fleet_member_expiries_total",
			Help: "Members this replica saw expire (their heartbeats stopped, without leaving): a dead replica, or one whose beats were too slow, which then drains beside the new owner until it beats again.",
		}),
		databases: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "drainer_fleet_databases",
			Help: "Databases by state: known (listed), owned (assigned to this replica), waiting (owned, still held by the replica letting it go), unreachable and schema_mismatch (owned, not drained yet).",
		}, []string{"state"}),
		dbErrors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "drainer_fleet_database_errors_total",
			Help: "Failures to start or stop draining a database, by database and reason (unreachable, schema_mismatch, start_timeout, stop).",
		}, []string{"database", "reason"}),
		catalogErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "drainer_fleet_catalog_errors_total",
			Help: "Failed reads of the database list; the last known list is kept.",
		}),
		coordErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "drainer_fleet_heartbeat_errors_total",
			Help: "Failed heartbeats to the coordination database (the last known members are kept), and failed or cut backlog publications after a beat.",
		}),
		handoversTotal: f.NewCounterVec(prometheus.CounterOpts{
			Name: "drainer_fleet_handovers_total",
			Help: "Databases this replica started (acquired) or stopped (released) draining.",
		}, []string{"direction"}),
	}
	for _, s := range []string{stateKnown, stateOwned, stateWaiting, stateUnreachable, stateSchemaMismatch} {
		m.databases.WithLabelValues(s)
	}
	m.handoversTotal.WithLabelValues("acquired")
	m.handoversTotal.WithLabelValues("released")
	return m
}

// labelLocked initialises at 0 the labelled series of the databases named
// (under Fleet.mu, or before Run).
func (f *Fleet) labelLocked(names []string) {
	for _, name := range names {
		if f.labelled[name] {
			continue
		}
		f.labelled[name] = true
		for _, r := range reasons {
			f.m.dbErrors.WithLabelValues(name, r)
		}
	}
}

// labelListedLocked gives every listed database its series at 0 and drops
// those of databases no longer listed (under Fleet.mu).
func (f *Fleet) labelListedLocked() {
	listed := make(map[string]bool, len(f.dbs))
	names := make([]string, 0, len(f.dbs))
	for _, db := range f.dbs {
		listed[db.Name] = true
		names = append(names, db.Name)
	}
	for name := range f.labelled {
		if !listed[name] {
			// Each series by its labels: a partial match scans every
			// series, so removing many databases at once cost the square
			// of the list, under Fleet.mu, and stopped the heartbeats.
			for _, r := range reasons {
				f.m.dbErrors.DeleteLabelValues(name, r)
			}
			delete(f.labelled, name)
		}
	}
	f.labelLocked(names)
}

// trackingRegisterer remembers what it registered, so a database's engine
// metrics can be unregistered when the database is let go.
type trackingRegisterer struct {
	prometheus.Registerer
	registered []prometheus.Collector
}

func (t *trackingRegisterer) Register(c prometheus.Collector) error {
	if err := t.Registerer.Register(c); err != nil {
		return err
	}
	t.registered = append(t.registered, c)
	return nil
}

func (t *trackingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := t.Register(c); err != nil {
			panic(err)
		}
	}
}

// unregisterAll removes every collector registered through t.
func (t *trackingRegisterer) unregisterAll() {
	for _, c := range t.registered {
		t.Registerer.Unregister(c)
	}
	t.registered = nil
}
