package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Rotation sizes one step of the queue's generations (rotate_queue): the
// current generation is closed once it holds FlipRows rows, or once its
// backlog drained leaving IdleRows settled rows or more, or when it is
// older than FlipAge and holds settled rows; a closed generation's rows
// move out once at most Chunk of them are due or in flight, Move at a time
// (Chunk when Move is 0).
//
// A move holds its generation's partition locked, and every claim waits
// for it: the engine's rotator (drainer/rotation.go) sets Move, step by
// step, to what it finds moves within MoveFor.
type Rotation struct {
	FlipRows int64
	IdleRows int
	FlipAge  time.Duration
	Chunk    int
	Move     int
	MoveFor  time.Duration
}

// DefaultRotation: a generation of at most about 50,000 rows, closed early
// once a backlog of 1,000 rows or more drained, or after an hour; its rows
// moved out once at most 5,000 are due or in flight there, in moves that
// each hold its partition for about 5 ms (some hundreds of rows).
var DefaultRotation = Rotation{FlipRows: 50_000, IdleRows: 1_000, FlipAge: time.Hour, Chunk: 5_000, MoveFor: 5 * time.Millisecond}

// MoveRows is the number of rows a move takes at most: Move, else Chunk.
func (r Rotation) MoveRows() int {
	if r.Move > 0 {
		return r.Move
	}
	return r.Chunk
}

// RotateStep is what one step of the rotation did (rotate_queue's answer).
type RotateStep struct {
	// Kind is moved, emptied, truncated, flipped, waiting, idle or busy.
	Kind string
	// Moved counts the rows a "moved" step moved.
	Moved int64
	// Held is how long a "moved" step held the generation's partition for
	// its move (0: not said), what the rotator sizes the next move by.
	Held time.Duration
}

// More reports whether another step may have work right away.
func (r RotateStep) More() bool {
	switch r.Kind {
	case "moved", "emptied", "truncated", "flipped":
		return true
	}
	return false
}

// RotateQueue runs one step of the generations' rotation in its own short
// transaction (migrations/code/functions/rotate_queue.sql).
func (s *Store) RotateQueue(ctx context.Context, db DB, r Rotation) (RotateStep, error) {
	var answer string
	err := db.QueryRow(ctx, s.sql(`SELECT {s}.rotate_queue($1, $2, $3 * interval '1 millisecond', $4, $5)`),
		r.FlipRows, r.IdleRows, r.FlipAge.Milliseconds(), r.Chunk, r.MoveRows()).Scan(&answer)
	if err != nil {
		return RotateStep{}, fmt.Errorf("rotate queue: %w", err)
	}
	step := RotateStep{Kind: answer}
	if n, ok := strings.CutPrefix(answer, "moved "); ok {
		step.Kind = "moved"
		// "moved N U" (U: microseconds held), or "moved N" (a move of none,
		// or a database whose code predates revision 25)
		f := strings.Fields(n)
		var held int64
		var err error
		if len(f) == 0 || len(f) > 2 {
			err = fmt.Errorf("%d fields", len(f))
		} else {
			_, err = fmt.Sscan(f[0], &step.Moved)
			if err == nil && len(f) == 2 {
				_, err = fmt.Sscan(f[1], &held)
			}
		}
		if err != nil {
			return step, fmt.Errorf("rotate queue: unexpected answer %q", answer)
		}
		step.Held = time.Duration(held) * time.Microsecond
	}
	return step, nil
}

// RotationSettled reports whether the rotation under r has nothing left to
// take away: fewer than r.IdleRows rows in the hot generations (so none
// will be closed for its settled rows) and no closed generation waiting to
// be emptied or truncated. Once it holds after a backlog drained, the
// backlog's dead row versions are gone with their generation.
func (s *Store) RotationSettled(ctx context.Context, db DB, r Rotation) (bool, error) {
	var done bool
	err := db.QueryRow(ctx, s.sql(`SELECT (SELECT count(*) FROM (SELECT 1 FROM {s}.queue WHERE gen <> 0 LIMIT $1) h) < $1
	    AND NOT EXISTS (SELECT 1 FROM {s}.queue_generations WHERE NOT current AND NOT ready)`), r.IdleRows).Scan(&done)
	if err != nil {
		return false, fmt.Errorf("rotation settled: %w", err)
	}
	return done, nil
}
