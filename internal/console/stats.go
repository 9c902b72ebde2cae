package console

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/drainer-io/drainer/drainer"
	"github.com/drainer-io/drainer/internal/fleet"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
)

// historyLen is how many samples the overview's chart keeps (at the
// default 2s, twenty minutes).
const historyLen = 600

// maxToolsShown bounds the overview's work by tool: the tools with the
// most rows, the others summed (producers name tools freely).
const maxToolsShown = 100

// Dispatch outcomes that send no request.
const (
	outcomeUnrouted    = "unrouted"
	outcomeBreakerOpen = "breaker_open"
)

// Sample is one point of the backlog over time.
type Sample struct {
	At       time.Time `json:"at"`
	Pending  int64     `json:"pending"`
	InFlight int64     `json:"in_flight"`
	Parked   int64     `json:"parked"`
	// DispatchPerSec is the requests this replica sent per second (every
	// dispatch outcome but unrouted and breaker_open).
	DispatchPerSec float64 `json:"dispatch_per_second"`
}

// Stats is the overview's data (GET /api/v1/stats).
type Stats struct {
	Database string `json:"database"`
	// Databases names every database the console shows.
	Databases []string `json:"databases"`
	// SampledAt is when the backlog was last measured; zero before the
	// first measurement.
	SampledAt time.Time `json:"sampled_at"`
	// SnapshotAt is when the daemons last measured the terminal counts.
	SnapshotAt *time.Time `json:"snapshot_at"`
	// RowsByStatus holds every status (from the daemons' snapshot for the
	// terminal ones, which may be planner estimates: see Estimated).
	RowsByStatus map[string]int64 `json:"rows_by_status"`
	Estimated    []outbox.Status  `json:"estimated,omitempty"`
	// RowsByTool counts the rows that hold work, by tool and status, of
	// the maxToolsShown tools with the most of them.
	RowsByTool []store.ToolCount `json:"rows_by_tool"`
	// OtherTools is how many more tools hold work, and OtherToolRows
	// their rows by status.
	OtherTools    int64            `json:"other_tools"`
	OtherToolRows map[string]int64 `json:"other_tool_rows"`
	// UnroutedTools are the tools of RowsByTool whose pending rows no
	// route takes: they wait until the config names them.
	UnroutedTools           []string `json:"unrouted_tools"`
	OldestPendingAgeSeconds float64  `json:"oldest_pending_age_seconds"`
	// DispatchRates are this replica's dispatches per second by outcome,
	// over the last sampling interval: with a fleet and a database, of
	// that database's engine on this replica only (none when it is not
	// drained here: see DrainedHere).
	DispatchRates map[string]float64 `json:"dispatch_rates"`
	// RequestsPerSecond is the sum of DispatchRates but unrouted and
	// breaker_open: the requests sent.
	RequestsPerSecond float64 `json:"requests_per_second"`
	// Adapters are the breakers and holds of the engine, each naming its
	// database with a fleet (the engines of this replica, or the one of
	// the database named).
	Adapters []AdapterState `json:"adapters"`
	// DrainedHere, with a fleet and a database, says whether this replica
	// drains it: false, its breakers, holds and rates are on the console
	// of the replica that does (DrainedBy, as it last published), not here.
	DrainedHere *bool  `json:"drained_here,omitempty"`
	DrainedBy   string `json:"drained_by,omitempty"`
	// Pauses are the pauses in force, each naming its database: of every
	// database with a fleet and no database named.
	Pauses []Pause `json:"pauses"`
	// PausesUnread names the databases whose pauses could not be read
	// (the whole fleet's overview), each with why: Pauses lacks theirs.
	PausesUnread []string `json:"pauses_unread,omitempty"`
	// RowsByDatabase is each database's backlog as its owner last
	// published it (a fleet only: databases: in the config), in the order
	// of the list; a database not yet published has state "unknown".
	RowsByDatabase []fleet.Backlog `json:"rows_by_database,omitempty"`
	// RowsByDatabaseReadAt is when this replica's heartbeat last read
	// them from the coordination database (a fleet only).
	RowsByDatabaseReadAt *time.Time `json:"rows_by_database_read_at,omitempty"`
	// History is the backlog over time: of the database, or of the whole
	// fleet (the sum of RowsByDatabase) with databases: in the config.
	History []Sample `json:"history"`
	Error   string   `json:"error,omitempty"`
}

// NoRoute says whether tool's pending rows wait for a route.
func (s Stats) NoRoute(tool string) bool { return slices.Contains(s.UnroutedTools, tool) }

// NotDrainedHere: with a fleet, this replica does not drain the database
// shown (its engine's breakers, holds and rates are elsewhere).
func (s Stats) NotDrainedHere() bool { return s.DrainedHere != nil && !*s.DrainedHere }

// OtherRows is the sum of OtherToolRows.
func (s Stats) OtherRows() int64 {
	var n int64
	for _, v := range s.OtherToolRows {
		n += v
	}
	return n
}

// AdapterState is an adapter's breaker and its auth holds.
type AdapterState struct {
	// Database is the database of the engine (a fleet's).
	Database string `json:"database,omitempty"`
	Adapter  string `json:"adapter"`
	Ready    bool   `json:"ready"`
	Reason   string `json:"reason,omitempty"`
	Holds    []Hold `json:"holds"`
}

// Hold is one auth hold under way.
type Hold struct {
	Route string    `json:"route"`
	Since time.Time `json:"since"`
}

// sampler measures the backlog periodically and keeps its history.
type sampler struct {
	s    *Server
	size int
	// fails logs the failed samples, at most once a minute while they
	// keep failing.
	fails *sampleLog

	mu      sync.Mutex
	last    Stats
	history []Sample
	prev    map[rateKey]float64 // dispatch counters at the last sample
	prevAt  time.Time
	// byDB are the rates of the last sample by database (label database
	// of a fleet's engines; "" without).
	byDB map[string]map[string]float64
}

// rateKey is one series of drainer_dispatch_total summed over adapters.
type rateKey struct{ database, outcome string }

func newSampler(s *Server, size int) *sampler {
	return &sampler{s: s, size: size, fails: newSampleLog(s.log, time.Now), last: Stats{RowsByStatus: map[string]int64{}}}
}

func (m *sampler) run(ctx context.Context, every time.Duration) {
	for {
		start := time.Now()
		ok := m.sample(ctx)
		t := time.NewTimer(nextSample(every, time.Since(start), ok))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// nextSample is the wait before the next measurement, after one that
// took took: a measurement that takes long (a huge backlog to count) is
// repeated less often, so that the console never spends more than a tenth
// of the database's time on it. A failed one is repeated after every: its
// time says nothing of the measurement's cost (it may have waited for a
// lock, or for a database that is gone, until its timeout), and the
// overview should not show the stale figures ten times longer.
func nextSample(every, took time.Duration, ok bool) time.Duration {
	if !ok {
		return every
	}
	return max(every, 10*took)
}

// sample measures the first database's backlog once, or a fleet's from
// what its replicas published, and reports whether it did.
func (m *sampler) sample(ctx context.Context) bool {
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st := Stats{RowsByStatus: map[string]int64{}, SampledAt: time.Now().UTC(), Databases: m.s.names()}
	var err error
	if m.s.cfg.Fleet != nil {
		err = m.measureFleet(&st)
	} else {
		d := m.s.dbs[0]
		st.Database = d.Name
		err = m.measure(qctx, d, &st)
	}
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		m.fails.failed(err)
		m.mu.Lock()
		m.last.Error = "the last measurement failed: " + err.Error()
		m.mu.Unlock()
		return false
	}
	m.fails.ok()
	st.DispatchRates = m.rates()
	total := sent(st.DispatchRates)
	st.RequestsPerSecond = total
	smp := Sample{At: st.SampledAt, Pending: st.RowsByStatus[string(outbox.StatusPending)], InFlight: st.RowsByStatus[string(outbox.StatusInFlight)],
		Parked: st.RowsByStatus[string(outbox.StatusOutcomeUnknown)] + st.RowsByStatus[string(outbox.StatusCompensationFailed)], DispatchPerSec: total}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.history = append(m.history, smp)
	if len(m.history) > m.size {
		m.history = slices.Delete(m.history, 0, len(m.history)-m.size)
	}
	m.last = st
	return true
}

// measureFleet sums every database's published backlog, as the fleet's
// heartbeat last read it from the coordination database (no connection of
// the console's anywhere): the overview of a fleet.
func (m *sampler) measureFleet(st *Stats) error {
	pub, readAt, err := m.s.cfg.Fleet.Backlogs()
	if err != nil {
		return err
	}
	st.RowsByDatabaseReadAt = &readAt
	byName := map[string]fleet.Backlog{}
	for _, b := range pub {
		byName[b.Name] = b
	}
	for _, s := range outbox.Statuses {
		st.RowsByStatus[string(s)] = 0
	}
	st.RowsByDatabase = []fleet.Backlog{}
	for _, name := range st.Databases {
		b, ok := byName[name]
		if !ok {
			b = fleet.Backlog{Name: name, State: "unknown", RowsByStatus: map[string]int64{}}
		}
		for k, v := range b.RowsByStatus {
			st.RowsByStatus[k] += v
		}
		st.OldestPendingAgeSeconds = max(st.OldestPendingAgeSeconds, b.OldestPendingAgeSeconds)
		st.RowsByDatabase = append(st.RowsByDatabase, b)
	}
	st.Adapters = m.engines(st.Databases)
	return nil
}

// of is the overview of one database of a fleet, measured now through its
// pool (opened for the asking, closed again when idle): its counts, work by
// tool and pauses, beside the fleet's table and history.
func (m *sampler) of(ctx context.Context, d *db) (Stats, error) {
	st := m.snapshot()
	st.Database, st.RowsByStatus, st.SnapshotAt, st.Estimated, st.OldestPendingAgeSeconds = d.Name, map[string]int64{}, nil, nil, 0
	if err := m.measure(ctx, d, &st); err != nil {
		return st, err
	}
	m.engineOf(&st, d.Name)
	return st, nil
}

// measure reads the backlog: the snapshot the daemons keep, the work rows
// counted exactly by tool, the pauses, the adapters.
func (m *sampler) measure(ctx context.Context, d *db, st *Stats) error {
	snap, ok, err := d.Store.ReadSnapshot(ctx, d.DB)
	if err != nil {
		return err
	}
	for _, s := range outbox.Statuses {
		st.RowsByStatus[string(s)] = 0
	}
	if ok {
		for k, v := range snap.RowsByStatus {
			st.RowsByStatus[string(k)] = v
		}
		st.Estimated = snap.Stats.Estimated
		at := snap.TakenAt.UTC()
		st.SnapshotAt = &at
		st.OldestPendingAgeSeconds = snap.OldestPendingAge
	}
	tools, err := d.Store.CountsByTopTools(ctx, d.DB, maxToolsShown)
	if err != nil {
		return err
	}
	st.RowsByTool, st.OtherTools = tools.Top, tools.Tools-int64(distinctTools(tools.Top))
	st.OtherToolRows = map[string]int64{}
	// The work statuses, exact and fresher than the snapshot.
	work := map[outbox.Status]int64{}
	for k, v := range tools.Other {
		work[k] += v
		st.OtherToolRows[string(k)] = v
	}
	for _, tc := range st.RowsByTool {
		work[tc.Status] += tc.Rows
	}
	for _, s := range []outbox.Status{outbox.StatusPending, outbox.StatusInFlight, outbox.StatusOutcomeUnknown, outbox.StatusCompensationFailed} {
		st.RowsByStatus[string(s)] = work[s]
	}
	st.UnroutedTools = m.unrouted(st.RowsByTool, snap.Stats.Unrouted)
	if st.Pauses, err = pausesOf(ctx, d); err != nil {
		return err
	}
	st.Adapters = m.adapters()
	return nil
}

// unrouted lists the tools of counts with pending rows and no route: by
// the routing in force when the console runs beside an engine, else as
// the daemons' last backlog snapshot found them (snap).
func (m *sampler) unrouted(counts []store.ToolCount, snap []store.UnroutedTool) []string {
	var routed map[string]bool
	if m.s.cfg.Routed != nil {
		routed = map[string]bool{}
		for _, t := range m.s.cfg.Routed() {
			routed[t] = true
		}
	}
	found := map[string]bool{}
	for _, u := range snap {
		found[u.Tool] = true
	}
	out := []string{}
	seen := map[string]bool{}
	for _, tc := range counts {
		if tc.Status != outbox.StatusPending || tc.Rows == 0 || seen[tc.Tool] {
			continue
		}
		seen[tc.Tool] = true
		if routed != nil && !routed[tc.Tool] || routed == nil && found[tc.Tool] {
			out = append(out, tc.Tool)
		}
	}
	return out
}

// distinctTools counts the tools of counts.
func distinctTools(counts []store.ToolCount) int {
	seen := map[string]bool{}
	for _, tc := range counts {
		seen[tc.Tool] = true
	}
	return len(seen)
}

func (m *sampler) adapters() []AdapterState {
	out := []AdapterState{}
	if m.s.cfg.Adapters == nil {
		return out
	}
	return adapterStates(m.s.cfg.Adapters(), "")
}

// adapterStates turns an engine's states into the overview's, naming
// database (a fleet's engine; "" without).
func adapterStates(states []drainer.AdapterState, database string) []AdapterState {
	out := []AdapterState{}
	for _, a := range states {
		x := AdapterState{Database: database, Adapter: a.Adapter, Ready: a.Ready, Reason: a.Reason, Holds: []Hold{}}
		for _, h := range a.Holds {
			x.Holds = append(x.Holds, Hold{Route: h.Route, Since: h.Since.UTC()})
		}
		out = append(out, x)
	}
	return out
}

// rates turns drainer_dispatch_total into per-second rates by outcome
// since the previous sample: this replica's, every database it drains
// summed. Each database's (the label database of a fleet's engines) are
// kept for its overview (ratesOf).
func (m *sampler) rates() map[string]float64 {
	out := map[string]float64{}
	g := m.s.cfg.Gatherer
	if g == nil {
		return out
	}
	mfs, err := g.Gather()
	if err != nil {
		return out
	}
	now := time.Now()
	cur := map[rateKey]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "drainer_dispatch_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			var k rateKey
			for _, l := range mt.GetLabel() {
				switch l.GetName() {
				case "outcome":
					k.outcome = l.GetValue()
				case "database":
					k.database = l.GetValue()
				}
			}
			if k.outcome != "" {
				cur[k] += mt.GetCounter().GetValue()
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	prev, prevAt := m.prev, m.prevAt
	m.prev, m.prevAt, m.byDB = cur, now, map[string]map[string]float64{}
	dt := now.Sub(prevAt).Seconds()
	if prev == nil || dt <= 0 {
		return out
	}
	for k, v := range cur {
		r := 0.0
		if d := v - prev[k]; d > 0 {
			r = d / dt
		}
		out[k.outcome] += r
		if m.byDB[k.database] == nil {
			m.byDB[k.database] = map[string]float64{}
		}
		m.byDB[k.database][k.outcome] += r
	}
	return out
}

// ratesOf returns the rates of database's engine at the last sample
// (none when this replica does not drain it).
func (m *sampler) ratesOf(database string) map[string]float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.byDB[database])
}

// sent sums the rates of the outcomes that send a request.
func sent(rates map[string]float64) float64 {
	var total float64
	for k, v := range rates {
		if k != outcomeUnrouted && k != outcomeBreakerOpen {
			total += v
		}
	}
	return total
}

// snapshot returns the latest stats with the history.
func (m *sampler) snapshot() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.last
	st.History = slices.Clone(m.history)
	if st.History == nil {
		st.History = []Sample{}
	}
	if st.RowsByTool == nil {
		st.RowsByTool = []store.ToolCount{}
	}
	if st.OtherToolRows == nil {
		st.OtherToolRows = map[string]int64{}
	}
	if st.Pauses == nil {
		st.Pauses = []Pause{}
	}
	if st.UnroutedTools == nil {
		st.UnroutedTools = []string{}
	}
	if st.Adapters == nil {
		st.Adapters = []AdapterState{}
	}
	if st.DispatchRates == nil {
		st.DispatchRates = map[string]float64{}
	}
	return st
}
