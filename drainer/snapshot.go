package drainer

import (
	"context"
	"time"

	"github.com/drainer-io/drainer/internal/maintenance"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
)

// apply exports s on the metrics.
func (m *Metrics) apply(s store.Snapshot) {
	for _, st := range outbox.Statuses {
		m.OutboxRows.WithLabelValues(st).Set(float64(s.RowsByStatus[st]))
	}
	m.OldestPendingAge.Set(s.OldestPendingAge)
	m.OldestInFlightAge.Set(s.OldestInFlightAge)
	m.SnapshotAge.Set(s.Age.Seconds())
	m.SnapshotCost.Set(s.CostSeconds)
	m.LiveTuples.Set(float64(s.Stats.LiveTuples))
	m.DeadTuples.Set(float64(s.Stats.DeadTuples))
	m.LastVacuumAge.Set(s.Stats.LastVacuumAge)
	m.XminHorizonAge.Set(s.Stats.XminHorizonAge)
	m.UnroutedRows.Reset()
	m.UnroutedOldestAge.Reset()
	for _, u := range s.Stats.Unrouted {
		m.UnroutedRows.WithLabelValues(u.Tool).Set(float64(u.Rows))
		m.UnroutedOldestAge.WithLabelValues(u.Tool).Set(u.OldestAge)
	}
}

// readEnqueueCounters reads the retry-tax counters of drainer.enqueue.
func (e *Engine) readEnqueueCounters(ctx context.Context) error {
	c, err := e.st.ReadEnqueueCounters(ctx, e.pool)
	if err != nil {
		return err
	}
	e.metrics.enqueueDuplicates.Store(uint64(max(c.Duplicates, 0)))
	e.metrics.enqueueMismatches.Store(uint64(max(c.Mismatches, 0)))
	return nil
}

// snapshotter keeps the backlog gauges fresh: one replica computes, every
// replica exports the latest snapshot. Scrapes never run a query.
func (e *Engine) snapshotter() *maintenance.Loop {
	return maintenance.Periodic("snapshotter", maintenance.Every(e.cfg.SnapshotInterval), nil, func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, max(e.cfg.SnapshotInterval, 30*time.Second))
		defer cancel()
		if _, err := e.st.RefreshSnapshot(ctx, e.pool, e.cfg.SnapshotInterval/2, e.routing.Load().RoutedTools()); err != nil && !isShutdown(ctx, err) {
			e.log.Warn("backlog snapshot failed", "err", err)
		}
		if s, ok, err := e.st.ReadSnapshot(ctx, e.pool); err == nil && ok {
			e.metrics.apply(s)
		}
		if err := e.readEnqueueCounters(ctx); err != nil && !isShutdown(ctx, err) {
			e.log.Warn("reading the enqueue counters failed", "err", err)
		}
	})
}
