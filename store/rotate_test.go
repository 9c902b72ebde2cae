package store_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// testRotation closes a generation as soon as it holds a row, and moves
// small chunks, so that a test sees every step.
var testRotation = store.Rotation{FlipRows: 1 << 40, IdleRows: 1 << 30, FlipAge: time.Millisecond, Chunk: 50}

// rotateUntilQuiet runs rotation steps until one has nothing more to do
// and returns the kinds of the steps that did something.
func rotateUntilQuiet(t *testing.T, st *store.Store, pool *pgxpool.Pool, r store.Rotation) []string {
	t.Helper()
	var kinds []string
	for range 10_000 {
		step, err := st.RotateQueue(t.Context(), pool, r)
		if err != nil {
			t.Fatal(err)
		}
		if !step.More() {
			return kinds
		}
		kinds = append(kinds, step.Kind)
	}
	t.Fatalf("rotation never settled: %v", kinds)
	return nil
}

// rotateUntilTruncated runs rotation steps as rotateUntilQuiet does until
// one truncated a generation, and returns every step that did something.
// The truncation waits for the transactions running when the generation
// was emptied, any test's in this cluster: while one runs, the rotation
// says waiting, and is asked again (bounded: a failure only).
func rotateUntilTruncated(t *testing.T, st *store.Store, pool *pgxpool.Pool, r store.Rotation) []string {
	t.Helper()
	var kinds []string
	testkit.WaitFor(t, 2*time.Minute, "a generation to be truncated", func() (bool, string) {
		kinds = append(kinds, rotateUntilQuiet(t, st, pool, r)...)
		return slices.Contains(kinds, "truncated"), fmt.Sprintf("steps so far %v", kinds)
	})
	return kinds
}

// drainAll claims every due row and completes it with status (pending:
// due again in an hour).
func drainAll(t *testing.T, st *store.Store, pool *pgxpool.Pool, status func(i int) outbox.Status) {
	t.Helper()
	rows, err := st.Claim(t.Context(), pool, store.Claim{Limit: 100_000, Lease: time.Minute, Replica: "r", Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	cs := make([]store.Completion, len(rows))
	for i, r := range rows {
		cs[i] = store.Completion{Seq: r.Seq, Token: r.LeaseToken, Attempts: r.Attempts, Status: status(i), Response: []byte(`{}`), ResponseStatus: 200}
		if cs[i].Status == outbox.StatusPending {
			cs[i].Delay, cs[i].Response, cs[i].ResponseStatus = time.Hour, nil, 503
		}
	}
	done, err := st.Complete(t.Context(), pool, cs)
	if err != nil || len(done.Lost) > 0 {
		t.Fatalf("complete: lost %v, %v", done.Lost, err)
	}
}

type genCounts map[int]int

func countByGen(t *testing.T, pool *pgxpool.Pool) genCounts {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT gen, count(*) FROM drainer.queue GROUP BY gen`)
	if err != nil {
		t.Fatal(err)
	}
	out := genCounts{}
	var g, n int
	if _, err := pgx.ForEachRow(rows, []any{&g, &n}, func() error { out[g] = n; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func scalar[T any](t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := q.QueryRow(t.Context(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

func assertAuditVerifies(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if n := scalar[int64](t, pool, `SELECT count(*) FROM drainer.audit_verify(1000)`); n != 0 {
		t.Fatalf("audit_verify reports %d problems", n)
	}
}

// TestRotationTruncatesADrainedGeneration: once a generation's backlog has
// drained, its settled rows move to the settled partition and its pending
// ones to the current generation, nothing is appended to any audit chain,
// and the generation is truncated: what the drain left there is gone
// without a vacuum, and every row reads as before, claimable where it now
// lives.
func TestRotationTruncatesADrainedGeneration(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	storetest.Enqueue(t, pool, "run-rot", "t", 300)
	drainAll(t, st, pool, func(i int) outbox.Status {
		if i%15 == 0 {
			return outbox.StatusPending // 20 rows wait for a retry in an hour
		}
		return outbox.StatusSucceeded
	})
	before := storetest.CountByStatus(t, pool)
	entries := scalar[int64](t, pool, `SELECT count(*) FROM drainer.audit`)
	if g := countByGen(t, pool); g[1] != 300 {
		t.Fatalf("rows by generation before the rotation: %v, want 300 in generation 1", g)
	}
	if size := scalar[int64](t, pool, `SELECT pg_relation_size('drainer.queue_g1')`); size == 0 {
		t.Fatal("generation 1 is empty on disk before the rotation")
	}

	kinds := rotateUntilTruncated(t, st, pool, testRotation)
	t.Logf("steps: %v", kinds)
	if len(kinds) < 3 || kinds[0] != "flipped" || kinds[len(kinds)-1] != "truncated" {
		t.Fatalf("steps %v: want flipped, the moves, emptied, truncated", kinds)
	}
	if g := countByGen(t, pool); g[0] != 280 || g[2] != 20 || g[1] != 0 {
		t.Fatalf("rows by generation after the rotation: %v, want 280 settled (0) and 20 pending in the current generation (2)", g)
	}
	if size := scalar[int64](t, pool, `SELECT pg_relation_size('drainer.queue_g1')`); size != 0 {
		t.Fatalf("generation 1 still holds %d bytes after its truncation", size)
	}
	if after := storetest.CountByStatus(t, pool); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("rows by status changed by the rotation: %v, was %v", after, before)
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM drainer.audit`); n != entries {
		t.Fatalf("the rotation appended %d audit entries; a move is not a change", n-entries)
	}
	if cur := scalar[int16](t, pool, `SELECT gen FROM drainer.queue_generations WHERE current`); cur != 2 {
		t.Fatalf("current generation %d, want 2", cur)
	}
	if !scalar[bool](t, pool, `SELECT ready FROM drainer.queue_generations WHERE gen = 1`) {
		t.Fatal("generation 1 is not ready for reuse after its truncation")
	}
	assertAuditVerifies(t, pool)

	// The moved pending rows are claimed and completed where they are now.
	if _, err := pool.Exec(t.Context(), `UPDATE drainer.queue SET next_attempt_at = now(), not_before = NULL WHERE status = 'pending'`); err != nil {
		t.Fatal(err)
	}
	drainAll(t, st, pool, func(int) outbox.Status { return outbox.StatusSucceeded })
	if c := storetest.CountByStatus(t, pool); c[outbox.StatusSucceeded] != 300 {
		t.Fatalf("after draining the moved rows: %v", c)
	}
	// A new enqueue goes to the current generation; the next rotation
	// closes it and reuses generation 1 after it.
	storetest.Enqueue(t, pool, "run-rot-2", "t", 5)
	if g := countByGen(t, pool); g[2] != 25 {
		t.Fatalf("rows by generation after a new enqueue: %v, want 25 in generation 2", g)
	}
	drainAll(t, st, pool, func(int) outbox.Status { return outbox.StatusSucceeded })
	rotateUntilQuiet(t, st, pool, testRotation)
	if g := countByGen(t, pool); g[0] != 305 || len(g) != 1 {
		t.Fatalf("rows by generation after the second rotation: %v, want all 305 settled", g)
	}
	if cur := scalar[int16](t, pool, `SELECT gen FROM drainer.queue_generations WHERE current`); cur != 3 {
		t.Fatalf("current generation %d, want 3", cur)
	}
	assertAuditVerifies(t, pool)
}

// TestRotationWaitsForOldSnapshots: a transaction whose snapshot is older
// than a move still sees the moved rows where they were, so their
// generation is not truncated while it runs, even when it has not read
// the queue yet (it holds no lock on it); once it ends, the generation is
// truncated.
func TestRotationWaitsForOldSnapshots(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	keys := storetest.Enqueue(t, pool, "run-snap", "t", 120)
	drainAll(t, st, pool, func(int) outbox.Status { return outbox.StatusSucceeded })
	ctx := t.Context()

	old, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = old.Rollback(ctx) }()
	if n := scalar[int](t, old, `SELECT 1`); n != 1 { // the snapshot, and no lock on the queue
		t.Fatal(n)
	}

	kinds := rotateUntilQuiet(t, st, pool, testRotation)
	if len(kinds) == 0 || kinds[len(kinds)-1] != "emptied" {
		t.Fatalf("steps %v: want the moves, then emptied and no truncation while the old snapshot is held", kinds)
	}
	if step, err := st.RotateQueue(ctx, pool, testRotation); err != nil || step.Kind != "waiting" {
		t.Fatalf("step with the old snapshot held: %+v, %v; want waiting", step, err)
	}
	// The old snapshot still reads every row, as it was.
	if n := scalar[int](t, old, `SELECT count(*) FROM drainer.outbox WHERE status = 'succeeded'`); n != 120 {
		t.Fatalf("the old snapshot reads %d succeeded rows, want 120", n)
	}
	if s := scalar[outbox.Status](t, old, `SELECT status FROM drainer.outbox WHERE key = $1`, keys[7]); s != outbox.StatusSucceeded {
		t.Fatalf("the old snapshot reads %s", s)
	}
	if err := old.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if kinds := rotateUntilTruncated(t, st, pool, testRotation); len(kinds) != 1 || kinds[0] != "truncated" {
		t.Fatalf("steps once the old snapshot ended: %v, want truncated", kinds)
	}
	if g := countByGen(t, pool); g[0] != 120 || len(g) != 1 {
		t.Fatalf("rows by generation: %v", g)
	}
	assertAuditVerifies(t, pool)
}

// TestRotationWaitsOnlyForThisDatabase: a transaction held open in another
// database of the same server, from before the generation was closed until
// after it was truncated, does not hold the truncation back (it cannot see
// this database's tables; vacuum does not wait for it either). Counting
// every transaction of the server, the rotation waited for it as long as it
// ran, and a transaction held for hours elsewhere stalled every truncation
// here.
func TestRotationWaitsOnlyForThisDatabase(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := t.Context()
	elsewhere, err := pgx.Connect(ctx, dbtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = elsewhere.Close(context.Background()) }()
	held, err := elsewhere.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Rollback(context.Background()) }()
	var vxid string
	if err := held.QueryRow(ctx, `SELECT virtualtransaction FROM pg_locks
	      WHERE pid = pg_backend_pid() AND locktype = 'virtualxid'`).Scan(&vxid); err != nil {
		t.Fatal(err)
	}

	storetest.Enqueue(t, pool, "run-else", "t", 60)
	drainAll(t, st, pool, func(int) outbox.Status { return outbox.StatusSucceeded })
	if kinds := rotateUntilTruncated(t, st, pool, testRotation); !slices.Contains(kinds, "truncated") {
		t.Fatalf("steps %v: want a truncation", kinds)
	}
	if running := scalar[bool](t, pool, `SELECT drainer.any_running(ARRAY[$1::text])`, vxid); !running {
		t.Fatalf("the transaction of the other database (%s) ended before the truncation: the test proves nothing", vxid)
	}
	if g := countByGen(t, pool); g[0] != 60 || len(g) != 1 {
		t.Fatalf("rows by generation: %v", g)
	}
	assertAuditVerifies(t, pool)
}

// TestRotationLosesNoConcurrentWrite: writers change rows while the
// rotation moves them between generations and truncates the emptied ones,
// in a random interleaving (the seed is logged). A write under READ
// COMMITTED always finds its row (it waits for a move and reads the moved
// row); one under REPEATABLE READ, from a snapshot taken before a move,
// either finds its row or fails with a serialization error and is retried:
// never does a write match no row, and every row ends with the last value
// written to it.
func TestRotationLosesNoConcurrentWrite(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	const rows, writers = 400, 4
	storetest.Enqueue(t, pool, "run-w", "t", rows)
	drainAll(t, st, pool, func(i int) outbox.Status {
		if i%3 == 0 {
			return outbox.StatusPending
		}
		return outbox.StatusSucceeded
	})
	var seqs []int64
	// the writers write the rows that keep moving: pending ones, which go
	// from generation to generation (settled ones move once)
	r, err := pool.Query(t.Context(), `SELECT seq FROM drainer.queue WHERE status = 'pending' ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	var s int64
	if _, err := pgx.ForEachRow(r, []any{&s}, func() error { seqs = append(seqs, s); return nil }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*20*time.Second)
	defer cancel()

	rot := store.Rotation{FlipRows: 1 << 40, IdleRows: 1 << 30, FlipAge: time.Millisecond, Chunk: 20}
	var truncated, retried atomic.Int64
	var kindsMu sync.Mutex
	kinds := map[string]int{}
	defer func() { kindsMu.Lock(); t.Logf("rotation steps: %v", kinds); kindsMu.Unlock() }()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the rotation, as fast as it goes
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			step, err := st.RotateQueue(ctx, pool, rot)
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("rotate: %v", err)
				}
				return
			}
			if step.Kind == "truncated" {
				truncated.Add(1)
			}
			kindsMu.Lock()
			kinds[step.Kind]++
			kindsMu.Unlock()
		}
	}()
	var enqueued atomic.Int64
	wg.Add(1)
	go func() { // settled rows in the current generation keep the rotation turning
		defer wg.Done()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			var key string
			err := pool.QueryRow(ctx, `SELECT key FROM drainer.enqueue('run-e', $1, 't', 'default', '{}')`, fmt.Sprintf("step-%d", n)).Scan(&key)
			if err == nil {
				_, err = pool.Exec(ctx, `UPDATE drainer.queue SET status = 'cancelled', cancel_cause = 'operator'
					 WHERE seq = (SELECT i.seq FROM drainer.intents i WHERE i.key = $1)`, key)
			}
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("enqueue: %v", err)
				}
				return
			}
			enqueued.Add(1)
			time.Sleep(time.Millisecond)
		}
	}()
	last := make([]map[int64]string, writers)
	var ops atomic.Int64
	for w := range writers {
		last[w] = map[int64]string{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			mine := seqs[w*len(seqs)/writers : (w+1)*len(seqs)/writers] // disjoint: the last write is known
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				seq := mine[rng.IntN(len(mine))]
				note := fmt.Sprintf("w%d-%d", w, n)
				err := writeNote(ctx, pool, rng, seq, note, &retried)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("writer %d, row %d: %v", w, seq, err)
					}
					return
				}
				last[w][seq] = note
				ops.Add(1)
			}
		}()
	}
	// Stop once the rotation has truncated generations under the writers
	// several times; the bound is generous, and reaching it fails.
	for (truncated.Load() < 10 || ops.Load() < 1000) && !t.Failed() {
		if ctx.Err() != nil {
			close(stop)
			wg.Wait()
			var dbg string
			_ = pool.QueryRow(context.Background(), `SELECT (SELECT json_agg(q) FROM drainer.queue_generations q)::text || (SELECT json_agg(x) FROM (SELECT gen, status, count(*) FROM drainer.queue GROUP BY 1,2) x)::text`).Scan(&dbg)
			t.Fatalf("after 3 minutes: %d truncations, %d writes, %d enqueued; %s", truncated.Load(), ops.Load(), enqueued.Load(), dbg)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("%d writes, %d retried after a serialization failure, %d truncations, %d rows enqueued", ops.Load(), retried.Load(), truncated.Load(), enqueued.Load())
	for w := range writers {
		for seq, note := range last[w] {
			if got := scalar[string](t, pool, `SELECT coalesce(note, '') FROM drainer.queue WHERE seq = $1`, seq); got != note {
				t.Fatalf("row %d: note %q, want the last one written, %q", seq, got, note)
			}
		}
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM drainer.queue`); n != rows+enqueued.Load() {
		t.Fatalf("%d queue rows, want %d", n, rows+enqueued.Load())
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM (SELECT seq FROM drainer.queue GROUP BY seq HAVING count(*) > 1) d`); n != 0 {
		t.Fatalf("%d rows are in two generations", n)
	}
	assertAuditVerifies(t, pool)
}

// writeNote sets the note of row seq: half the time under READ COMMITTED,
// half under REPEATABLE READ from a snapshot taken a moment before the
// write (retried after a serialization failure). A write that matches no
// row is an error.
func writeNote(ctx context.Context, pool *pgxpool.Pool, rng *rand.Rand, seq int64, note string, retried *atomic.Int64) error {
	iso := pgx.ReadCommitted
	if rng.IntN(2) == 0 {
		iso = pgx.RepeatableRead
	}
	pause := time.Duration(rng.IntN(10)) * time.Millisecond
	for {
		err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: iso}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
				return err
			}
			time.Sleep(pause)
			tag, err := tx.Exec(ctx, `UPDATE drainer.queue SET note = $2 WHERE seq = $1`, seq, note)
			if err != nil {
				return err
			}
			if tag.RowsAffected() != 1 {
				return fmt.Errorf("the write matched %d rows under %s", tag.RowsAffected(), iso)
			}
			return nil
		})
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "40001" && iso == pgx.RepeatableRead {
			retried.Add(1)
			continue
		}
		return err
	}
}

// TestRotationClosesADrainedBacklog: the current generation is closed
// early once a backlog of IdleRows rows or more has drained there (nothing
// due or in flight), not while it drains, nor for fewer settled rows.
func TestRotationClosesADrainedBacklog(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	rot := store.Rotation{FlipRows: 1 << 40, IdleRows: 100, FlipAge: time.Hour, Chunk: 500}
	storetest.Enqueue(t, pool, "run-small", "t", 60)
	drainAll(t, st, pool, func(int) outbox.Status { return outbox.StatusSucceeded })
	if kinds := rotateUntilQuiet(t, st, pool, rot); len(kinds) != 0 {
		t.Fatalf("steps after 60 rows drained (fewer than IdleRows): %v, want none", kinds)
	}
	storetest.Enqueue(t, pool, "run-big", "t", 150)
	if kinds := rotateUntilQuiet(t, st, pool, rot); len(kinds) != 0 {
		t.Fatalf("steps while 150 rows are due: %v, want none", kinds)
	}
	drainAll(t, st, pool, func(int) outbox.Status { return outbox.StatusSucceeded })
	kinds := rotateUntilTruncated(t, st, pool, rot)
	if len(kinds) != 4 || kinds[0] != "flipped" || kinds[3] != "truncated" {
		t.Fatalf("steps once the backlog drained: %v, want flipped, moved, emptied, truncated", kinds)
	}
	if g := countByGen(t, pool); g[0] != 210 || len(g) != 1 {
		t.Fatalf("rows by generation: %v, want all 210 settled", g)
	}
}

// TestRotationMovesAtMostMoveRows: a closed generation's rows leave once
// at most Chunk of them are due or in flight, and each move takes at most
// Move of them (a claim waits for every move, so the rotator keeps them
// small); the gate counts the due rows through their index, so a
// generation whose statistics still say every row is pending is not read
// through to find none.
func TestRotationMovesAtMostMoveRows(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	storetest.Enqueue(t, pool, "run-move", "t", 2_000)
	// statistics taken while every row was pending, as after a fill
	if _, err := pool.Exec(t.Context(), `ANALYZE drainer.queue_g1`); err != nil {
		t.Fatal(err)
	}
	drainAll(t, st, pool, func(i int) outbox.Status {
		if i >= 1_997 { // the last three rows
			return outbox.StatusPending
		}
		return outbox.StatusSucceeded
	})
	// three rows due again: more than a Chunk of 2
	if _, err := pool.Exec(t.Context(), `UPDATE drainer.queue SET next_attempt_at = now(), not_before = NULL WHERE status = 'pending'`); err != nil {
		t.Fatal(err)
	}
	r := store.Rotation{FlipRows: 1 << 40, IdleRows: 1 << 30, FlipAge: time.Millisecond, Chunk: 2, Move: 7}
	if step, err := st.RotateQueue(t.Context(), pool, r); err != nil || step.Kind != "flipped" {
		t.Fatalf("first step %+v, %v; want flipped", step, err)
	}
	// What a step reads of the generation, from its backend's counters
	// (the first step meets the index entries the drain left, the next
	// ones do not).
	conn, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	read := func() int64 {
		return scalar[int64](t, conn, `SELECT seq_tup_read + coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables WHERE relid = 'drainer.queue_g1'::regclass`)
	}
	var reads []int64
	for range 3 {
		before := read()
		step, err := st.RotateQueue(t.Context(), conn, r)
		if err != nil || step.Kind != "waiting" {
			t.Fatalf("step with 3 rows due and a chunk of 2: %+v, %v; want waiting", step, err)
		}
		reads = append(reads, read()-before)
	}
	if reads[1] > 50 || reads[2] > 50 {
		t.Fatalf("the gate's steps read %v tuples of a generation of 2,000 rows to count 3 due ones; want them counted in the index", reads)
	}

	// Once they are claimed (in flight: 3 > 2 still) and settled, the
	// moves begin, 7 rows at most each.
	drainAll(t, st, pool, func(int) outbox.Status { return outbox.StatusSucceeded })
	var moves []int64
	for range 1_000 {
		step, err := st.RotateQueue(t.Context(), pool, r)
		if err != nil {
			t.Fatal(err)
		}
		if step.Kind != "moved" {
			break
		}
		moves = append(moves, step.Moved)
	}
	var total int64
	for _, m := range moves {
		if m > 7 || m < 1 {
			t.Fatalf("a move of %d rows with Move 7: %v", m, moves)
		}
		total += m
	}
	if total != 2_000 {
		t.Fatalf("the moves took %d rows (%d moves), want all 2,000", total, len(moves))
	}
	if g := countByGen(t, pool); g[0] != 2_000 {
		t.Fatalf("rows by generation after the moves: %v, want all 2,000 settled (0)", g)
	}
	assertAuditVerifies(t, pool)
}

// TestRotationMoveReadsWhatItMoves: each move of a drained generation
// starts where the last one ended (queue_generations.moved_upto), so the
// last moves of 20,000 rows read as many of the generation's blocks as the
// first ones, while a snapshot older than the moves is held. Before, each
// move looked for its rows from the primary key's first entry: while any
// snapshot kept the moved rows' entries alive, a move read every row moved
// before it, and a drained generation of 10^6 rows took hours to leave in
// moves of 5 ms. A row in flight when the moves
// pass it is moved once its attempt ends, by a pass from the first row,
// and the generation is then truncated.
func TestRotationMoveReadsWhatItMoves(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	const n, move = 20_000, 500
	storetest.Enqueue(t, pool, "run-move-cost", "t", n)
	drainAll(t, st, pool, func(int) outbox.Status { return outbox.StatusSucceeded })
	// one row in flight, early in the generation: the moves pass it
	held := scalar[int64](t, pool, `SELECT min(seq) + 10 FROM drainer.queue`)
	if _, err := pool.Exec(t.Context(), `UPDATE drainer.queue SET status = 'in_flight', lease_token = gen_random_uuid(),
	        lease_expires_at = now() + interval '1 hour', leased_by = 'r' WHERE seq = $1`, held); err != nil {
		t.Fatal(err)
	}
	r := store.Rotation{FlipRows: 1 << 40, IdleRows: 1 << 30, FlipAge: time.Millisecond, Chunk: 5_000, Move: move}
	if step, err := st.RotateQueue(t.Context(), pool, r); err != nil || step.Kind != "flipped" {
		t.Fatalf("first step %+v, %v; want flipped", step, err)
	}
	// One step in a transaction of its own, and the blocks of the
	// generation's table and indexes it read.
	step := func() (store.RotateStep, int64) {
		t.Helper()
		tx, err := pool.Begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		// (the backend's counts not yet reported: read before and after)
		const fetched = `SELECT pg_stat_get_xact_blocks_fetched('drainer.queue_g1'::regclass)
		                        + (SELECT sum(pg_stat_get_xact_blocks_fetched(x.indexrelid))::bigint
		                             FROM pg_index x WHERE x.indrelid = 'drainer.queue_g1'::regclass)`
		before := scalar[int64](t, tx, fetched)
		s, err := st.RotateQueue(t.Context(), tx, r)
		if err != nil {
			t.Fatal(err)
		}
		blocks := scalar[int64](t, tx, fetched) - before
		if err := tx.Commit(t.Context()); err != nil {
			t.Fatal(err)
		}
		return s, blocks
	}
	// A snapshot held meanwhile (a long report, a REPEATABLE READ
	// producer, a standby's feedback): the moved rows' index entries stay
	// live to it, so a scan from the first entry meets every one of them.
	holder, err := pool.BeginTx(t.Context(), pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(context.Background()) }()
	scalar[int64](t, holder, `SELECT count(*) FROM drainer.queue_generations`)
	var blocks []int64
	moved := int64(0)
	for busyUntil := time.Now().Add(2 * time.Minute); ; {
		s, b := step()
		if s.Kind == "busy" && time.Now().Before(busyUntil) {
			// Another backend (autovacuum, on a loaded machine) held the
			// generation past the step's lock timeout: asked again.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if s.Kind != "moved" || s.Moved == 0 || s.Held <= 0 {
			t.Fatalf("step after %d rows moved: %+v; want a move, and how long it held the partition", moved, s)
		}
		moved += s.Moved
		blocks = append(blocks, b)
		if moved >= n-1-move {
			break
		}
	}
	// The first move meets the drain's index entries and row versions
	// (their hint bits); from the third on, each reads about the same
	// (some 7 blocks a row: the row and its key, found, then deleted).
	// The last five full moves, past 17,000 moved rows, against the five
	// from the third: reading the rows moved before adds a block for each
	// (its version in the table, which the snapshot still sees).
	mean := func(b []int64) int64 {
		var sum int64
		for _, x := range b {
			sum += x
		}
		return sum / int64(len(b))
	}
	early, late := mean(blocks[2:7]), mean(blocks[len(blocks)-6:len(blocks)-1])
	t.Logf("blocks read by each move of %d rows: %v", move, blocks)
	if late > early+early/20+50 {
		t.Fatalf("blocks read by each move: %v; the last moves read %d blocks on average against %d for the first: each move reads the rows moved before it", blocks, late, early)
	}
	if err := holder.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The rest: the moves reach the end, start again from the first row
	// (the one in flight stays), and wait for it.
	for range 10 {
		s, _ := step()
		for busyUntil := time.Now().Add(2 * time.Minute); s.Kind == "busy" && time.Now().Before(busyUntil); {
			time.Sleep(10 * time.Millisecond)
			s, _ = step()
		}
		if s.Kind == "waiting" {
			break
		}
		if s.Kind != "moved" {
			t.Fatalf("step %+v; want moves, then waiting for the row in flight", s)
		}
	}
	if g := countByGen(t, pool); g[1] != 1 || g[0] != n-1 {
		t.Fatalf("rows by generation: %v; want the row in flight alone left in generation 1", g)
	}
	// Its attempt ends: it is moved, and the generation truncated.
	if _, err := pool.Exec(t.Context(), `UPDATE drainer.queue SET status = 'succeeded', lease_token = NULL,
	        lease_expires_at = NULL, leased_by = NULL WHERE seq = $1`, held); err != nil {
		t.Fatal(err)
	}
	// The truncation waits for the transactions of this database running
	// when the generation was emptied (a pooled connection's, autovacuum's
	// analyze): while one runs, the rotation says waiting and is asked
	// again (two minutes).
	var kinds []string
	for waitedUntil := time.Now().Add(2 * time.Minute); len(kinds) < 10 && time.Now().Before(waitedUntil); {
		s, _ := step()
		if s.Kind == "busy" || s.Kind == "waiting" && len(kinds) > 0 && kinds[len(kinds)-1] == "emptied" {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		kinds = append(kinds, s.Kind)
		if s.Kind == "truncated" {
			break
		}
	}
	if len(kinds) == 0 || kinds[len(kinds)-1] != "truncated" {
		t.Fatalf("steps after the last row settled: %v; want it moved and the generation truncated", kinds)
	}
	if g := countByGen(t, pool); g[0] != n || g[1] != 0 {
		t.Fatalf("rows by generation after the truncation: %v; want all %d settled", g, n)
	}
	assertAuditVerifies(t, pool)
}
