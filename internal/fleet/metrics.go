package fleet

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Database states counted by drainer_fleet_databases.
const (
	stateKnown          = "known"
	stateOwned          = "owned"
	stateUnreachable    = "unreachable"
	stateSchemaMismatch = "schema_mismatch"
)

// Reasons counted by drainer_fleet_database_errors_total.
const (
	reasonUnreachable    = "unreachable"
	reasonSchemaMismatch = "schema_mismatch"
	reasonStop           = "stop"
)

// metrics are the fleet's own collectors, beside each database's engine
// metrics (which carry the database label).
type metrics struct {
	members        prometheus.Gauge
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
		databases: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "drainer_fleet_databases",
			Help: "Databases by state: known (listed), owned (assigned to this replica), unreachable and schema_mismatch (owned, not drained yet).",
		}, []string{"state"}),
		dbErrors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "drainer_fleet_database_errors_total",
			Help: "Failures to start or stop draining a database, by database and reason (unreachable, schema_mismatch, stop).",
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
	for _, s := range []string{stateKnown, stateOwned, stateUnreachable, stateSchemaMismatch} {
		m.databases.WithLabelValues(s)
	}
	m.handoversTotal.WithLabelValues("acquired")
	m.handoversTotal.WithLabelValues("released")
	return m
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
