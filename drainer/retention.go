package drainer

import (
	"cmp"
	"context"
	"time"

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

// retentionLoop prunes on every replica's schedule; one replica at a time
// does the work (an advisory lock), the others skip that round.
func (e *Engine) retentionLoop() {
	defer e.loops.Done()
	for {
		p := e.routing.Load().Retention
		if !sleep(e.fetchCtx, cmp.Or(p.Interval, time.Minute)) {
			return
		}
		if !p.Enabled {
			continue
		}
		e.pruneOnce(p)
	}
}

func (e *Engine) pruneOnce(p RetentionPolicy) {
	ctx, cancel := context.WithTimeout(e.fetchCtx, 2*time.Minute)
	defer cancel()
	var pruned map[string]int
	_, err := e.st.WithRetentionLock(ctx, e.pool, func(db store.DB) error {
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
	case err != nil && !isShutdown(e.fetchCtx, err):
		e.log.Warn("retention pass failed", "err", err)
	case len(pruned) > 0:
		e.log.Debug("retention pass", "pruned", pruned)
	}
}
