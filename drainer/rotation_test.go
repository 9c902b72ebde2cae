package drainer

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// TestNextMove: a rotation's moves grow to what the last one's pace moves
// within the budget, at most doubling, shrink at once when a move was
// slow, never below minMove nor above the chunk, and a move that found
// fewer rows than it asked for leaves the size alone.
func TestNextMove(t *testing.T) {
	t.Parallel()
	const budget = 5 * time.Millisecond
	for _, c := range []struct {
		name  string
		size  int
		moved int64
		took  time.Duration
		chunk int
		want  int
	}{
		{"fast: doubles, no more", 100, 100, time.Millisecond, 5_000, 200},
		{"at the budget's pace", 400, 400, 8 * time.Millisecond, 5_000, 250},
		{"slow: shrinks at once", 1_000, 1_000, 50 * time.Millisecond, 5_000, 100},
		{"very slow: the floor", 100, 100, time.Second, 5_000, minMove},
		{"the chunk caps it", 4_000, 4_000, time.Millisecond, 5_000, 5_000},
		{"a chunk below the floor", 3, 3, time.Second, 3, 3},
		{"the generation's last rows", 300, 12, time.Millisecond, 5_000, 300},
		{"no time measured", 300, 300, 0, 5_000, 300},
	} {
		if got := nextMove(c.size, c.moved, c.took, budget, c.chunk); got != c.want {
			t.Errorf("%s: nextMove(%d, %d, %s, %s, %d) = %d, want %d", c.name, c.size, c.moved, c.took, budget, c.chunk, got, c.want)
		}
	}
	// From the first move, a steady pace of 20 µs a row settles at the
	// budget's 250 rows within a few moves and stays there.
	size := firstMove
	for range 10 {
		size = nextMove(size, int64(size), time.Duration(size)*20*time.Microsecond, budget, 5_000)
	}
	if size != 250 {
		t.Fatalf("at 20 µs a row the moves settled at %d rows, want 250", size)
	}
}

// TestRotatorMovesInSmallMoves: the engine's rotator takes a drained
// generation's rows out in moves sized by their pace, the first one
// firstMove rows and none more than twice the one before, until the
// generation is truncated with every row moved and none lost.
func TestRotatorMovesInSmallMoves(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ok := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		return dispatch.Result{Outcome: dispatch.Success, Status: 200}
	})
	const n = 1_500
	enqueueN(t, pool, "run-rotator", "ok", n)
	var buf testkit.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"ok": ok}, &Route{Tool: "ok"}), Config{
		Workers: 8, Logger: log, RotateInterval: 50 * time.Millisecond,
		// closed once its backlog drained; moves sized for 5 ms
		Rotation: store.Rotation{FlipRows: 1 << 40, IdleRows: 100, FlipAge: time.Hour, Chunk: 5_000},
	})
	testkit.WaitFor(t, 2*time.Minute, "the drained generation moved out and truncated", func() (bool, string) {
		var settled, ready int64
		err := pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM drainer.queue WHERE gen = 0 AND status = 'succeeded'),
		       (SELECT count(*) FROM drainer.queue_generations WHERE gen = 1 AND ready)`).Scan(&settled, &ready)
		if err != nil {
			t.Fatal(err)
		}
		return settled == n && ready == 1, fmt.Sprintf("%d rows settled in gen 0, generation 1 ready: %d", settled, ready)
	})
	var moves []int64
	for line := range strings.SplitSeq(buf.String(), "\n") {
		var m struct {
			Msg   string `json:"msg"`
			Rows  int64  `json:"rows"`
			Asked int64  `json:"asked"`
		}
		if json.Unmarshal([]byte(line), &m) != nil || m.Msg != moveMsg {
			continue
		}
		if m.Rows > m.Asked {
			t.Fatalf("a move of %d rows when %d were asked for", m.Rows, m.Asked)
		}
		moves = append(moves, m.Asked)
	}
	t.Logf("moves asked for: %v", moves)
	if len(moves) < 2 || moves[0] != firstMove {
		t.Fatalf("moves asked for %v: want a first move of %d rows and more after it", moves, firstMove)
	}
	for i := 1; i < len(moves); i++ {
		if moves[i] > 2*moves[i-1] || moves[i] < minMove {
			t.Fatalf("moves asked for %v: move %d outside [%d, twice the one before]", moves, i, minMove)
		}
	}
}
