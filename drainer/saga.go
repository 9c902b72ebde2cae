package drainer

import (
	"context"
	"time"

	"github.com/drainer-io/drainer/compensations"
)

// sagaLoop advances open sagas: at SagaInterval, and at once when a
// completion concerns a saga (a forward row failed, a compensation row ended).
// It also queues the alert of each compensation_failed row when an alert
// adapter is configured.
func (e *Engine) sagaLoop() {
	defer e.loops.Done()
	t := time.NewTicker(e.cfg.SagaInterval)
	defer t.Stop()
	for {
		select {
		case <-e.fetchCtx.Done():
			return
		case <-t.C:
		case <-e.sagaWake:
		}
		rt := e.routing.Load()
		ctx, cancel := context.WithTimeout(e.fetchCtx, 30*time.Second)
		if _, err := compensations.Sweep(ctx, e.pool, e.cfg.Schema, rt.Compensations, 500); err != nil && !isShutdown(e.fetchCtx, err) {
			e.log.Warn("saga sweep failed", "err", err)
		}
		if rt.CompensationFailedAlert != "" {
			n, err := compensations.QueueAlerts(ctx, e.pool, e.cfg.Schema)
			switch {
			case err != nil && !isShutdown(e.fetchCtx, err):
				e.log.Warn("queueing compensation_failed alerts failed", "err", err)
			case n > 0:
				e.log.Error("compensation failed: a human must act; alert queued", "alerts", n, "adapter", rt.CompensationFailedAlert)
			}
		}
		cancel()
	}
}

// afterComplete wakes the saga loop when a written batch concerns a saga.
func (e *Engine) afterComplete(batch []completion) {
	for i := range batch {
		c := &batch[i]
		if c.Status == StatusFailed || (c.row != nil && c.row.Kind == "compensation" && c.Status != StatusPending) {
			select {
			case e.sagaWake <- struct{}{}:
			default:
			}
			return
		}
	}
}
