package drainer

import (
	"context"
	"time"

	"github.com/drainer-io/drainer/internal/maintenance"
)

// rotator turns the queue's generations (docs/architecture.md,
// "Generations"): every RotateInterval it runs rotate_queue's steps until
// one has nothing more to do right away, each step a short transaction of
// its own, so that a generation whose backlog drained leaves by
// truncation, not by vacuum. One replica at a time does the work (an
// advisory lock in rotate_queue); the others' steps answer busy.
func (e *Engine) rotator() *maintenance.Loop {
	return maintenance.Periodic("rotator", maintenance.Every(e.cfg.RotateInterval), nil, func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := e.rotate(ctx); err != nil && !isShutdown(ctx, err) && e.db.failed("rotator", err) {
			e.log.Warn("queue rotation failed", "err", err)
		}
	})
}

// rotate runs rotation steps until one has nothing more to do now. Between
// moves it yields for as long as the move took, so that claims waiting
// for the moved partition go first.
func (e *Engine) rotate(ctx context.Context) error {
	var moved int64
	defer func() {
		if moved > 0 {
			e.log.Debug("queue rotation moved rows out of a closed generation", "rows", moved)
		}
	}()
	for ctx.Err() == nil {
		start := time.Now()
		step, err := e.st.RotateQueue(ctx, e.pool, e.cfg.Rotation)
		if err != nil {
			return err
		}
		switch step.Kind {
		case "flipped":
			e.log.Info("queue generation closed: new rows go to the next one")
		case "truncated":
			e.log.Info("queue generation truncated: its settled rows moved out, its dead row versions gone")
		}
		moved += step.Moved
		if !step.More() {
			return nil
		}
		if !sleep(ctx, time.Since(start)) {
			return ctx.Err()
		}
	}
	return ctx.Err()
}
