package drainer

import (
	"context"
	"time"
)

func (e *Engine) reclaimLoop() {
	defer e.loops.Done()
	t := time.NewTicker(e.cfg.ReclaimInterval)
	defer t.Stop()
	for {
		select {
		case <-e.fetchCtx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(e.fetchCtx, 30*time.Second)
		n, err := e.st.Reclaim(ctx, e.pool, e.routing.Load().NonIdempotentTools())
		cancel()
		switch {
		case err != nil && !isShutdown(e.fetchCtx, err):
			e.log.Warn("reclaim failed", "err", err)
		case n > 0:
			e.metrics.LeasesExpired.Add(float64(n))
			e.log.Warn("reclaimed rows whose lease expired", "rows", n)
			e.signal()
		}
	}
}
