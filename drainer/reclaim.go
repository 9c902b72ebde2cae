package drainer

import (
	"context"
	"time"

	"github.com/drainer-io/drainer/internal/maintenance"
	"github.com/drainer-io/drainer/store"
)

// reclaimer takes back rows whose lease expired (their worker died or
// hung, or its replica lost the database): pending again with the attempt
// counted, or outcome_unknown on non_idempotent routes, due once the lease
// has expired and held only by what drainer knows (Routing.ReclaimPolicy:
// the row's floor, the route's reclaim_hold, the Retry-After its tool was
// answered recently), unless the worker's replica writes its answer first:
// each pass writes this replica's held answers before it reclaims.
// Every few minutes it also drops the Retry-After marks no reclaim reads
// any more.
func (e *Engine) reclaimer() *maintenance.Loop {
	var pruned time.Time
	return maintenance.Periodic("reclaimer", maintenance.Every(e.cfg.ReclaimInterval), nil, func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		// The answers this replica holds (got while the database was
		// unreachable) are written first, and the rows of those it still
		// holds are not reclaimed by it: its own rows, whose leases expired
		// meanwhile, take its answers instead of being sent again.
		_ = e.completer.writeUnwritten(ctx, false)
		policy := e.routing.Load().ReclaimPolicy()
		policy.Held = e.completer.held()
		sent := time.Now()
		from, err := e.st.ReclaimFrom(ctx, e.pool, policy)
		switch {
		case err != nil && !isShutdown(ctx, err) && e.db.failed("reclaimer", sent, err):
			e.log.Warn("reclaim failed", "err", err)
		case len(from) > 0:
			n := 0
			for replica, rows := range from {
				n += rows
				e.log.Warn("reclaimed rows whose lease expired: their replica was lost, stopped or cut off from the database mid-call",
					"rows", rows, "replica", replica, "this_replica", replica == e.cfg.ReplicaID)
			}
			e.metrics.LeasesExpired.Add(float64(n))
			e.signalFull()
		}
		if time.Since(pruned) >= markPruneInterval {
			pruned = time.Now()
			if _, err := e.st.PruneRetryAfterMarks(ctx, e.pool, longestWindow(policy)); err != nil && !isShutdown(ctx, err) && e.db.failed("reclaimer", pruned, err) {
				e.log.Warn("dropping old Retry-After marks failed", "err", err)
			}
		}
	})
}

// markPruneInterval is how often a replica drops old Retry-After marks.
const markPruneInterval = 5 * time.Minute

// longestWindow is how far back any reclaim of p reads Retry-After marks.
func longestWindow(p store.ReclaimPolicy) time.Duration {
	w := p.OtherWindow
	for _, d := range p.Window {
		w = max(w, d)
	}
	return w
}
