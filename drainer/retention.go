package drainer

import (
	"cmp"
	"context"
	"time"

	"github.com/drainer-io/drainer/internal/maintenance"
	"github.com/drainer-io/drainer/store"
)

// RetentionPolicy says what retention prunes and when. Tombstones are kept
// longer than any provider's idempotency window, so a late re-enqueue is
// never sent twice.
type RetentionPolicy struct {
	Enabled  bool
	Interval time.Duration
	store.Retention
}

// pruner prunes on every replica's schedule; one replica at a time does
// the work (an advisory lock), the others skip that round.
func (e *Engine) pruner() *maintenance.Loop {
	interval := func() time.Duration { return cmp.Or(e.routing.Load().Retention.Interval, time.Minute) }
	return maintenance.Periodic("pruner", interval, nil, func(ctx context.Context) {
		if p := e.routing.Load().Retention; p.Enabled {
			e.pruneOnce(ctx, p)
		}
	})
}

// pruneOnce runs one retention pass, on one replica at a time. Its budget
// is a minute of statements; each pruning batch is bounded by
// p.BatchTimeout, and an audit rotation step, whose work grows with its
// generation, runs to its end (store.RotateAudit): only a shutdown ends
// it. A bound on the whole pass once ended every anchoring of a
// generation past a few million entries at the same point, and the audit
// stopped rotating.
func (e *Engine) pruneOnce(ctx context.Context, p RetentionPolicy) {
	sent := time.Now()
	var pruned map[string]int
	_, err := e.st.WithRetentionLock(ctx, e.pool, func(db store.BeginDB) error {
		var err error
		pruned, err = e.st.Prune(ctx, db, p.Retention, time.Minute)
		return err
	})
	for kind, n := range pruned {
		if kind != "run" && n > 0 {
			e.metrics.PrunedRows.WithLabelValues(kind).Add(float64(n))
		}
	}
	switch {
	case err != nil && !isShutdown(ctx, err):
		if e.db.failed("retention", sent, err) {
			e.log.Warn("retention pass failed", "err", err)
		}
	case len(pruned) > 0:
		e.log.Debug("retention pass", "pruned", pruned)
	}
}
