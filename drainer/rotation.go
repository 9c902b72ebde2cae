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
		sent := time.Now()
		if err := e.rotate(ctx); err != nil && !isShutdown(ctx, err) && e.db.failed("rotator", sent, err) {
			e.log.Warn("queue rotation failed", "err", err)
		}
	})
}

// rotate runs rotation steps until one has nothing more to do now. A move
// holds its generation's partition locked, and every claim waits for it,
// so each move takes the rows that the last one's pace says fit in
// Rotation.MoveFor (nextMove), and between moves the rotator yields for
// as long as the step took, so that the claims that waited go first. The
// pace is the one the database measured while the move held the
// partition (RotateStep.Held): the step's round trip, gate and commit,
// the same for any move, would otherwise count as the lock's, and every
// move would shrink to minMove (a drained 10^6-row generation took 7
// minutes to leave, in moves of 50 rows).
func (e *Engine) rotate(ctx context.Context) error {
	r := e.cfg.Rotation
	fixed := r.Move > 0
	if !fixed {
		r.Move = min(firstMove, r.Chunk)
	}
	for ctx.Err() == nil {
		start := time.Now()
		step, err := e.st.RotateQueue(ctx, e.pool, r)
		if err != nil {
			return err
		}
		took := time.Since(start)
		switch step.Kind {
		case "moved":
			size := r.Move
			held := step.Held
			if held <= 0 {
				held = took // a database that does not say (code before revision 25)
			}
			if !fixed {
				r.Move = nextMove(r.Move, step.Moved, held, r.MoveFor, r.Chunk)
			}
			e.log.Debug(moveMsg, "rows", step.Moved, "asked", size, "held", held, "took", took, "next", r.MoveRows())
		case "flipped":
			e.log.Info("queue generation closed: new rows go to the next one")
		case "truncated":
			e.log.Info("queue generation truncated: its settled rows moved out, its dead row versions gone")
		}
		if !step.More() {
			return nil
		}
		if !sleep(ctx, time.Since(start)) {
			return ctx.Err()
		}
	}
	return ctx.Err()
}

// moveMsg is logged (debug) for every move of a closed generation's rows.
const moveMsg = "queue rotation moved rows out of a closed generation"

// firstMove is the size of a rotation's first move, before its pace is known.
const firstMove = 100

// minMove is the smallest move: a rotation moves at least this many rows
// a step however slow the moves are, so that it ends.
const minMove = 50

// nextMove sizes the move after one that was asked for size rows and moved
// moved in took: as many rows as that pace moves in budget, at most twice
// size (the pace of a small move says little about a large one), at least
// minMove, at most chunk. A move that found fewer rows than it was asked
// for says nothing about the pace and leaves the size as it was.
func nextMove(size int, moved int64, took, budget time.Duration, chunk int) int {
	if moved < int64(size) || took <= 0 {
		return size
	}
	n := int(float64(moved) * float64(budget) / float64(took))
	return max(min(n, 2*size, chunk), min(minMove, chunk))
}
