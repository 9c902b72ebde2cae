package drainer

import (
	"context"
	"time"

	"github.com/drainer-io/drainer/internal/maintenance"
)

// reclaimer takes back rows whose lease expired (their worker died or
// hung, or its replica lost the database): pending again with the attempt
// counted, or outcome_unknown on non_idempotent routes, not sent again
// before a Retry-After the lost attempt may have been given would allow
// (Routing.ReclaimPolicy) unless the worker's replica writes its answer.
func (e *Engine) reclaimer() *maintenance.Loop {
	return maintenance.Periodic("reclaimer", maintenance.Every(e.cfg.ReclaimInterval), nil, func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		n, err := e.st.Reclaim(ctx, e.pool, e.routing.Load().ReclaimPolicy())
		switch {
		case err != nil && !isShutdown(ctx, err):
			e.log.Warn("reclaim failed", "err", err)
		case n > 0:
			e.metrics.LeasesExpired.Add(float64(n))
			e.log.Warn("reclaimed rows whose lease expired", "rows", n)
			e.signalFull()
		}
	})
}
