package drainer

import (
	"errors"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics holds every collector of the engine (docs/reference.md §7). Build it once per
// process with NewMetrics on an injected registerer.
type Metrics struct {
	OutboxRows              *prometheus.GaugeVec
	OldestPendingAge        prometheus.Gauge
	OldestInFlightAge       prometheus.Gauge
	SnapshotAge             prometheus.GaugeFunc
	SnapshotRead            prometheus.GaugeFunc
	DispatchTotal           *prometheus.CounterVec
	DispatchDuration        *prometheus.HistogramVec
	ClaimBatchSize          prometheus.Histogram
	ClaimWithheld           prometheus.Counter
	InFlightBytes           prometheus.Gauge
	LeasesExpired           prometheus.Counter
	LeasesLost              prometheus.Counter
	CompletionsRefused      prometheus.Counter
	CompensationsTotal      *prometheus.CounterVec
	CompensationFailedTotal prometheus.Counter
	CircuitBreakerState     *prometheus.GaugeVec
	BuildInfo               *prometheus.GaugeVec
	WorkersBusy             prometheus.Gauge
	Workers                 prometheus.Gauge
	SnapshotCost            prometheus.Gauge
	LiveTuples              prometheus.Gauge
	DeadTuples              prometheus.Gauge
	LastVacuumAge           prometheus.Gauge
	XminHorizonAge          prometheus.Gauge
	UnroutedRows            *prometheus.GaugeVec
	UnroutedOldestAge       *prometheus.GaugeVec
	PrunedRows              *prometheus.CounterVec
	EnqueueDuplicates       prometheus.CounterFunc
	EnqueueMismatches       prometheus.CounterFunc

	// enqueueDuplicates and enqueueMismatches hold the database's counts
	// (sequences bumped by drainer.enqueue), read with the periodic gauges.
	enqueueDuplicates, enqueueMismatches atomic.Uint64
	// snapshotRead is the backlog snapshot apply exported last: its age
	// when read, and when (nil before the first); born is when these
	// collectors were made. drainer_outbox_snapshot_age_seconds is
	// computed from them at each scrape, so it grows while no snapshot is
	// read (the database slow or gone, the snapshotter stuck), counted
	// from the start before the first.
	snapshotRead atomic.Pointer[snapshotMark]
	born         time.Time
	// adapterStates is the engine's AdapterStates, read at each scrape
	// for drainer_adapter_ready and drainer_hold_seconds.
	adapterStates atomic.Pointer[func() []AdapterState]
	// configured is what those two export before an engine runs: the
	// adapters of the config the daemon starts with (InitConfigured).
	configured atomic.Pointer[[]AdapterState]
}

// NewMetrics registers every collector on reg and pre-initialises the label
// values known at startup, so dashboards show 0 rather than no data.
func NewMetrics(reg prometheus.Registerer, version string) *Metrics {
	m := NewDatabaseMetrics(reg)
	m.BuildInfo = RegisterBuildInfo(reg, version)
	return m
}

// RegisterBuildInfo registers drainer_build_info (always 1, labelled with
// version) on reg. A fleet registers it once for the process.
// Registering it again on the same reg returns the registered one.
func RegisterBuildInfo(reg prometheus.Registerer, version string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "drainer_build_info",
		Help: "Build information; always 1.",
	}, []string{"version"})
	if reg != nil {
		if err := reg.Register(g); err != nil {
			are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err)
			if !ok {
				panic(err)
			}
			g = are.ExistingCollector.(*prometheus.GaugeVec)
		}
	}
	g.WithLabelValues(version).Set(1)
	return g
}

// NewDatabaseMetrics registers the collectors of one database's engine:
// every one NewMetrics registers but drainer_build_info, which describes
// the process, not a database (a fleet labels these with the database and
// registers the build info once, RegisterBuildInfo).
func NewDatabaseMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{born: time.Now()}
	m.registerDispatch(f)
	m.registerBacklog(f)
	if reg != nil {
		reg.MustRegister(newAdapterCollector(func() []AdapterState {
			if fn := m.adapterStates.Load(); fn != nil {
				return (*fn)()
			}
			if c := m.configured.Load(); c != nil {
				return *c
			}
			return nil
		}))
	}
	return m
}

// registerDispatch registers what the engine counts as it works: attempts,
// claims, leases, compensations, breakers, workers.
func (m *Metrics) registerDispatch(f promauto.Factory) {
	m.DispatchTotal = f.NewCounterVec(prometheus.CounterOpts{
		Name: "drainer_dispatch_total",
		Help: "Dispatch attempts and decisions by adapter and outcome.",
	}, []string{"adapter", "outcome"})
	m.DispatchDuration = f.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "drainer_dispatch_duration_seconds",
		Help:    "Time of one provider request.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"adapter"})
	m.ClaimBatchSize = f.NewHistogram(prometheus.HistogramOpts{
		Name:    "drainer_claim_batch_size",
		Help:    "Rows leased per claim.",
		Buckets: []float64{0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512},
	})
	m.ClaimWithheld = f.NewCounter(prometheus.CounterOpts{
		Name: "drainer_claim_withheld_rows_total",
		Help: "Due rows a claim locked and left pending because their payloads did not fit max_in_flight_bytes.",
	})
	m.InFlightBytes = f.NewGauge(prometheus.GaugeOpts{
		Name: "drainer_in_flight_payload_bytes",
		Help: "Payload bytes of the rows being dispatched (bounded by max_in_flight_bytes).",
	})
	m.LeasesExpired = f.NewCounter(prometheus.CounterOpts{
		Name: "drainer_leases_expired_total",
		Help: "Rows reclaimed after their lease expired.",
	})
	m.LeasesLost = f.NewCounter(prometheus.CounterOpts{
		Name: "drainer_leases_lost_total",
		Help: "Completions rejected because another replica owned the row (fencing).",
	})
	m.CompletionsRefused = f.NewCounter(prometheus.CounterOpts{
		Name: "drainer_completions_refused_total",
		Help: "Completions the database refused even stripped of their details; the row stays in_flight until its lease expires.",
	})
	m.CompensationsTotal = f.NewCounterVec(prometheus.CounterOpts{
		Name: "drainer_compensations_total",
		Help: "Compensation attempts by outcome.",
	}, []string{"outcome"})
	m.CompensationFailedTotal = f.NewCounter(prometheus.CounterOpts{
		Name: "drainer_compensation_failed_total",
		Help: "Compensation rows that ended compensation_failed.",
	})
	m.CircuitBreakerState = f.NewGaugeVec(prometheus.GaugeOpts{
		Name: "drainer_circuit_breaker_state",
		Help: "Circuit breaker state by adapter: 0 closed, 1 half-open, 2 open.",
	}, []string{"adapter"})
	m.WorkersBusy = f.NewGauge(prometheus.GaugeOpts{
		Name: "drainer_workers_busy",
		Help: "Worker slots holding a leased row.",
	})
	m.Workers = f.NewGauge(prometheus.GaugeOpts{
		Name: "drainer_workers",
		Help: "Configured worker slots.",
	})
	for _, o := range outbox.CompensationOutcomes {
		m.CompensationsTotal.WithLabelValues(string(o))
	}
	m.DispatchTotal.WithLabelValues("", string(outbox.OutcomeUnrouted))
}

// registerBacklog registers what the engine reads from the database
// periodically: the backlog snapshot, table health, retention, and the
// retry-tax counters of drainer.enqueue.
func (m *Metrics) registerBacklog(f promauto.Factory) {
	m.OutboxRows = f.NewGaugeVec(prometheus.GaugeOpts{
		Name: "drainer_outbox_rows",
		Help: "Outbox rows by status, from the latest periodic snapshot (use max across replicas).",
	}, []string{"status"})
	m.OldestPendingAge = f.NewGauge(prometheus.GaugeOpts{
		Name: "drainer_outbox_oldest_pending_age_seconds",
		Help: "now() - min(next_attempt_at) over due pending rows; 0 when none (how late the drain is).",
	})
	m.OldestInFlightAge = f.NewGauge(prometheus.GaugeOpts{
		Name: "drainer_outbox_oldest_in_flight_age_seconds",
		Help: "Age of the oldest in-flight lease; 0 when none.",
	})
	m.SnapshotAge = f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "drainer_outbox_snapshot_age_seconds",
		Help: "Age now of the backlog snapshot the outbox gauges come from (before the first, the time since the replica started).",
	}, func() float64 { return m.snapshotAge(time.Now()).Seconds() })
	m.SnapshotRead = f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "drainer_outbox_snapshot_read",
		Help: "1 once this replica has read a backlog snapshot, 0 before: until then its drainer_outbox_* gauges are the startup zeros, not the database's counts.",
	}, func() float64 {
		if m.snapshotRead.Load() != nil {
			return 1
		}
		return 0
	})
	m.SnapshotCost = f.NewGauge(prometheus.GaugeOpts{
		Name: "drainer_outbox_snapshot_cost_seconds",
		Help: "Database time the latest backlog snapshot took.",
	})
	m.LiveTuples = f.NewGauge(prometheus.GaugeOpts{
		Name: "drainer_outbox_live_tuples",
		Help: "Live tuples of the queue table behind the outbox view, the one the drain rewrites (pg_stat_user_tables).",
	})
	m.DeadTuples = f.NewGauge(prometheus.GaugeOpts{
		Name: "drainer_outbox_dead_tuples",
		Help: "Dead tuples of the queue table behind the outbox view awaiting vacuum (pg_stat_user_tables).",
	})
	m.LastVacuumAge = f.NewGauge(prometheus.GaugeOpts{
		Name: "drainer_outbox_last_autovacuum_age_seconds",
		Help: "Seconds since the queue table behind the outbox view was last vacuumed; -1 if never.",
	})
	m.XminHorizonAge = f.NewGauge(prometheus.GaugeOpts{
		Name: "drainer_db_xmin_horizon_age_seconds",
		Help: "Age of the oldest transaction holding back the xmin horizon (no dead row can be vacuumed while it runs).",
	})
	m.UnroutedRows = f.NewGaugeVec(prometheus.GaugeOpts{
		Name: "drainer_unrouted_rows",
		Help: "Pending rows whose tool_name has no route, by tool (the 20 largest); the routed tools at 0.",
	}, []string{"tool"})
	m.UnroutedOldestAge = f.NewGaugeVec(prometheus.GaugeOpts{
		Name: "drainer_unrouted_oldest_age_seconds",
		Help: "Age of the oldest unrouted row, by tool; 0 = none.",
	}, []string{"tool"})
	m.PrunedRows = f.NewCounterVec(prometheus.CounterOpts{
		Name: "drainer_pruned_rows_total",
		Help: "Rows pruned by retention, by final status (audit for audit entries, tombstone for expired tombstones, anchor for the anchors of forgotten audit chains).",
	}, []string{"status"})
	m.EnqueueDuplicates = f.NewCounterFunc(prometheus.CounterOpts{
		Name: "drainer_enqueue_duplicates_total",
		Help: "drainer.enqueue calls answered created = false (the agents' retry tax), counted in the database even when the caller's transaction rolled back; every replica exports the same total (use max).",
	}, func() float64 { return float64(m.enqueueDuplicates.Load()) })
	m.EnqueueMismatches = f.NewCounterFunc(prometheus.CounterOpts{
		Name: "drainer_enqueue_mismatches_total",
		Help: "drainer.enqueue calls refused with 23505: same tuple, different payload (an agent bug or a key-normalisation bug); every replica exports the same total (use max).",
	}, func() float64 { return float64(m.enqueueMismatches.Load()) })
	for _, s := range append(outbox.StatusStrings(outbox.StatusSucceeded, outbox.StatusFailed, outbox.StatusCompensated, outbox.StatusCancelled), "audit", "tombstone") {
		m.PrunedRows.WithLabelValues(s)
	}
	for _, s := range outbox.Statuses {
		m.OutboxRows.WithLabelValues(string(s))
	}
}

// InitConfigured pre-initialises, when a daemon starts and before its
// engine runs (it may wait for the database a long time), the series of
// the adapters of its config and of the routes sending to each (routesOf:
// adapter -> tools): dispatch counts and latency, breaker state (closed),
// drainer_adapter_ready (0: nothing is sent before the engine runs),
// drainer_hold_seconds (0: not held) and drainer_unrouted_rows (0: a
// routed tool has no unrouted rows). Once an engine runs, it reports its
// own adapters.
func (m *Metrics) InitConfigured(routesOf map[string][]string) {
	names := slices.Sorted(maps.Keys(routesOf))
	m.InitAdapters(names)
	states := make([]AdapterState, 0, len(names))
	var tools []string
	for _, a := range names {
		routes := slices.Sorted(slices.Values(routesOf[a]))
		states = append(states, AdapterState{Adapter: a, Reason: "starting: the engine does not run yet", Routes: routes})
		tools = append(tools, routes...)
	}
	m.configured.Store(&states)
	m.setUnrouted(nil, tools)
}

// setUnrouted exports the unrouted rows of a snapshot, and 0 for each
// routed tool (which has none), replacing what was exported before.
func (m *Metrics) setUnrouted(unrouted []store.UnroutedTool, routed []string) {
	m.UnroutedRows.Reset()
	m.UnroutedOldestAge.Reset()
	for _, t := range routed {
		m.UnroutedRows.WithLabelValues(t).Set(0)
		m.UnroutedOldestAge.WithLabelValues(t).Set(0)
	}
	for _, u := range unrouted {
		m.UnroutedRows.WithLabelValues(u.Tool).Set(float64(u.Rows))
		m.UnroutedOldestAge.WithLabelValues(u.Tool).Set(u.OldestAge)
	}
}

// InitAdapters pre-initialises the per-adapter series.
func (m *Metrics) InitAdapters(names []string) {
	for _, a := range names {
		for _, o := range outbox.DispatchOutcomes {
			if o != outbox.OutcomeUnrouted {
				m.DispatchTotal.WithLabelValues(a, string(o))
			}
		}
		m.DispatchDuration.WithLabelValues(a)
		m.CircuitBreakerState.WithLabelValues(a)
	}
}

// snapshotMark is a snapshot's age when it was read, and when.
type snapshotMark struct {
	age    time.Duration
	readAt time.Time
}

// snapshotAge is the age at now of the snapshot the gauges export: its age
// when it was read plus the time since; before the first, the time since
// the collectors were made.
func (m *Metrics) snapshotAge(now time.Time) time.Duration {
	if r := m.snapshotRead.Load(); r != nil {
		return r.age + now.Sub(r.readAt)
	}
	return now.Sub(m.born)
}
