package drainer

import (
	"context"
	"time"

	"github.com/drainer-io/drainer/internal/maintenance"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
)

// apply exports s on the metrics; routed are the tools of the routing in
// force (0 unrouted rows each).
func (m *Metrics) apply(s store.Snapshot, routed []string) {
	for _, st := range outbox.Statuses {
		m.OutboxRows.WithLabelValues(string(st)).Set(float64(s.RowsByStatus[st]))
	}
	m.OldestPendingAge.Set(s.OldestPendingAge)
	m.OldestInFlightAge.Set(s.OldestInFlightAge)
	m.snapshotRead.Store(&snapshotMark{age: s.Age, readAt: time.Now()})
	m.SnapshotCost.Set(s.CostSeconds)
	m.LiveTuples.Set(float64(s.Stats.LiveTuples))
	m.DeadTuples.Set(float64(s.Stats.DeadTuples))
	m.LastVacuumAge.Set(s.Stats.LastVacuumAge)
	m.XminHorizonAge.Set(s.Stats.XminHorizonAge)
	m.setUnrouted(s.Stats.Unrouted, routed)
}

// backlog is the snapshot the snapshotter last read, with when it read it.
type backlog struct {
	snap   store.Snapshot
	readAt time.Time
}

// Backlog returns the backlog snapshot the engine last read for its gauges
// (drainer_outbox_rows) and its age now; ok is false before the first. It
// runs no query: a fleet publishes it for the console of every replica.
func (e *Engine) Backlog() (s store.Snapshot, age time.Duration, ok bool) {
	b := e.backlog.Load()
	if b == nil {
		return s, 0, false
	}
	return b.snap, b.snap.Age + time.Since(b.readAt), true
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
		sent := time.Now()
		_, err := e.st.RefreshSnapshot(ctx, e.pool, e.cfg.SnapshotInterval/2, e.routing.Load().RoutedTools())
		switch {
		case err == nil:
			e.db.okMaybeRead(sent)
		case !isShutdown(ctx, err) && e.db.failed("snapshotter", sent, err):
			e.log.Warn("backlog snapshot failed", "err", err)
		}
		if s, ok, err := e.st.ReadSnapshot(ctx, e.pool); err == nil && ok {
			e.metrics.apply(s, e.routing.Load().RoutedTools())
			e.backlog.Store(&backlog{snap: s, readAt: time.Now()})
		}
		sent = time.Now()
		if err := e.readEnqueueCounters(ctx); err != nil && !isShutdown(ctx, err) && e.db.failed("snapshotter", sent, err) {
			e.log.Warn("reading the enqueue counters failed", "err", err)
		}
	})
}
