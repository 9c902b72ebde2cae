package drainer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// The wake-up's tests run the engine with a poll of a minute: a row the
// wake-up misses is found only by the poll, and ClaimedRows says so (its
// "poll" count), whatever the machine's speed. Rows are waited for longer
// than the poll, so that a miss shows as a poll pickup, not as a timeout.
const (
	wakeTestPoll = time.Minute
	wakeTestWait = 3 * time.Minute
)

// startWithHooks starts an engine like startEngine, with the wake-up's
// test hooks in place before it starts.
func startWithHooks(t *testing.T, pool *pgxpool.Pool, rt *Routing, cfg Config, hooks wakeHooks) *Engine {
	t.Helper()
	cfg.Metrics = NewMetrics(prometheus.NewRegistry(), "test")
	cfg.Workers = cmp.Or(cfg.Workers, 8)
	cfg.Lease = cmp.Or(cfg.Lease, 10*time.Second)
	cfg.LeaseMargin = cmp.Or(cfg.LeaseMargin, 500*time.Millisecond)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, wakeTestPoll)
	e, err := New(pool, rt, cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.hooks = hooks
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return e
}

// wakeBackends returns the backends of the engine's own wake-up
// connections in this test's database, by application_name.
func wakeBackends(t *testing.T, pool *pgxpool.Pool) map[string]int32 {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT application_name, pid FROM pg_stat_activity
		WHERE datname = current_database() AND application_name IN ('drainer-wake', 'drainer-listen')`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int32{}
	for rows.Next() {
		var app string
		var pid int32
		if err := rows.Scan(&app, &pid); err != nil {
			t.Fatal(err)
		}
		out[app] = pid
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// gateLock reports whether the engine's gate connection holds a slot (its
// seat and its wake lock: granted), or waits for a wake lock (not granted).
func gateLock(t *testing.T, pool *pgxpool.Pool, granted bool) bool {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE a.datname = current_database() AND a.application_name = 'drainer-wake'
		  AND l.locktype = 'advisory' AND l.mode = 'ExclusiveLock' AND l.granted = $1`, granted).Scan(&n); err != nil {
		t.Fatal(err)
	}
	// A held slot is two granted locks (its seat and its wake lock); a
	// wait is one lock not granted.
	if granted {
		return n == 2
	}
	return n > 0
}

// gateWaitStart returns when the gate's transaction that waits for a wake
// lock began, or zero when it waits for none.
func gateWaitStart(t *testing.T, pool *pgxpool.Pool) time.Time {
	t.Helper()
	// pg_locks and pg_stat_activity are not read at one instant: the wait
	// may have ended in between, and then xact_start is NULL.
	var at *time.Time
	err := pool.QueryRow(t.Context(), `SELECT a.xact_start FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE a.datname = current_database() AND a.application_name = 'drainer-wake'
		  AND l.locktype = 'advisory' AND NOT l.granted`).Scan(&at)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	if at == nil {
		return time.Time{}
	}
	return *at
}

// polled is how many rows e claimed by a poll, those still waiting for
// their notification (pollWitness) included: the wake-up tests' poll comes
// only after the wake-up missed a row, and no notification will name it.
func polled(e *Engine) uint64 {
	e.witness.mu.Lock()
	defer e.witness.mu.Unlock()
	e.witness.settleLocked(time.Now(), &e.claims)
	return e.claims[causePoll].Load() + uint64(len(e.witness.held))
}

// dispatchedByWakeUp enqueues one row and waits until it has succeeded;
// it fails the test if any row so far was claimed by the poll.
func dispatchedByWakeUp(t *testing.T, e *Engine, pool *pgxpool.Pool, run, what string) {
	t.Helper()
	key := enqueueN(t, pool, run, "t", 1)[0]
	testkit.WaitFor(t, wakeTestWait, what+": the row succeeded", func() (bool, string) {
		return getRow(t, pool, key).Status == outbox.StatusSucceeded, ""
	})
	if n := polled(e); n > 0 {
		t.Fatalf("%s: %d rows claimed by the poll, not woken (claims by cause %v)", what, n, e.ClaimedRows())
	}
}

// TestWakeUpSurvivesKilledConnections: the wake gate's and the listener's
// connections are terminated, one, the other, then both, again and again,
// while the daemon sleeps; every row enqueued afterwards, one at a time, is
// claimed on a wake-up (a notification, or the claim that follows re-arming),
// never by the poll. Before, a daemon whose gate connection died went on
// believing it held its slot: producers stopped notifying and every row
// waited for the poll.
func TestWakeUpSurvivesKilledConnections(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ok := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		return dispatch.Result{Outcome: dispatch.Success}
	})
	e := startWithHooks(t, pool, testRouting(t, map[string]dispatch.Adapter{"t": ok}, &Route{Tool: "t"}),
		Config{Workers: 4}, wakeHooks{})
	kills := [][]string{{"drainer-wake"}, {"drainer-listen"}, {"drainer-wake", "drainer-listen"}}
	for round := range 3 * len(kills) {
		testkit.WaitFor(t, wakeTestWait, "the daemon asleep, holding its slot, listening", func() (bool, string) {
			b := wakeBackends(t, pool)
			return b["drainer-wake"] != 0 && b["drainer-listen"] != 0 && gateLock(t, pool, true), ""
		})
		backends := wakeBackends(t, pool)
		for _, app := range kills[round%len(kills)] {
			var killed bool
			if err := pool.QueryRow(t.Context(), `SELECT pg_terminate_backend($1)`, backends[app]).Scan(&killed); err != nil || !killed {
				t.Fatalf("round %d: terminate %s (pid %d): %v %v", round, app, backends[app], killed, err)
			}
		}
		for i := range 3 {
			dispatchedByWakeUp(t, e, pool, "round-"+itoa(round)+"-"+itoa(i), "round "+itoa(round)+" row "+itoa(i))
		}
	}
	var claimed uint64
	for _, n := range e.ClaimedRows() {
		claimed += n
	}
	if claimed != 9*3 {
		t.Errorf("%d rows claimed, want %d (claims by cause %v)", claimed, 9*3, e.ClaimedRows())
	}
}

// TestClaimLoopNeverWaitsForTheGate: the wake gate is stopped after taking
// its seat and before asking for its lock (as a slow connect or a
// producer's open transaction would stop it), and another sleeping daemon
// (the test) holds a slot, so producers notify. A notified row is claimed
// and dispatched while the gate is still stopped. Before, the claim loop
// armed the gate itself and waited: connecting took seconds on a loaded
// server, the lock up to 200 ms at a time, and no row was claimed meanwhile.
func TestClaimLoopNeverWaitsForTheGate(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ok := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		return dispatch.Result{Outcome: dispatch.Success}
	})
	// The test's own sleeping daemon: producers notify while it holds a slot.
	sleeper, err := pgx.ConnectConfig(t.Context(), pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer sleeper.Close(context.Background())
	slot, err := testStore.TakeWakeSeat(t.Context(), sleeper)
	if err != nil || slot < 0 {
		t.Fatalf("seat: %d %v", slot, err)
	}
	if held, err := testStore.HoldWake(t.Context(), sleeper, slot, 10*time.Second); err != nil || !held {
		t.Fatalf("hold: %v %v", held, err)
	}
	stopped, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	defer func() { once.Do(func() { close(release) }) }()
	e := startWithHooks(t, pool, testRouting(t, map[string]dispatch.Adapter{"t": ok}, &Route{Tool: "t"}),
		Config{Workers: 4}, wakeHooks{hold: func(ctx context.Context) {
			select {
			case stopped <- struct{}{}:
			default:
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
		}})
	select {
	case <-stopped:
	case <-time.After(wakeTestWait):
		t.Fatal("the gate never took a seat")
	}
	for i := range 3 {
		dispatchedByWakeUp(t, e, pool, "run-"+itoa(i), "row "+itoa(i)+" while the gate is stopped")
	}
	if gateLock(t, pool, true) {
		t.Fatal("the gate holds its lock: the hook did not stop it")
	}
	once.Do(func() { close(release) })
	testkit.WaitFor(t, wakeTestWait, "the gate holding its slot once let go", func() (bool, string) { return gateLock(t, pool, true), "" })
}

// TestGateRearmsAfterALargeClaim: rows whose producer skipped its
// notification (the daemon was busy: every worker held a row) are found by
// the claim that follows arming the gate; that claim brings enough rows to
// give the slot back, and the gate is taken again as soon as the loop finds
// nothing more due, while those rows are still in flight, so the next row
// is woken. Before, the claim right after arming gave the slot back and the
// daemon then slept without one: no producer notified it, and the next row
// waited for the poll (unless a worker happened to finish before the loop
// went to sleep).
func TestGateRearmsAfterALargeClaim(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	const workers, quiet = 40, disarmRows + 3
	busy, held := make(chan struct{}), make(chan struct{})
	var busyOnce, heldOnce sync.Once
	releaseBusy := func() { busyOnce.Do(func() { close(busy) }) }
	releaseHeld := func() { heldOnce.Do(func() { close(held) }) }
	defer releaseBusy()
	defer releaseHeld()
	adapter := dispatch.AdapterFunc(func(ctx context.Context, m *dispatch.Message) dispatch.Result {
		wait := map[string]chan struct{}{"busy": busy, "quiet": held}[m.Tuple.AgentRunID]
		if wait != nil {
			select {
			case <-wait:
			case <-ctx.Done():
			}
		}
		return dispatch.Result{Outcome: dispatch.Success}
	})
	e := startWithHooks(t, pool, testRouting(t, map[string]dispatch.Adapter{"t": adapter}, &Route{Tool: "t"}),
		Config{Workers: workers, BatchSize: workers}, wakeHooks{})
	testkit.WaitFor(t, wakeTestWait, "the daemon asleep, holding its slot", func() (bool, string) { return gateLock(t, pool, true), "" })
	// Every worker busy: the claim was a full batch, the slot is given back.
	enqueueN(t, pool, "busy", "t", workers)
	testkit.WaitFor(t, wakeTestWait, "every worker busy and the slot given back", func() (bool, string) {
		return countByStatus(t, pool)["in_flight"] == workers && !gateLock(t, pool, true) && !gateLock(t, pool, false), ""
	})
	// A producer enqueues while no daemon sleeps (no notification) and
	// keeps its transaction open.
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	for i := range quiet {
		if _, err := tx.Exec(t.Context(), `SELECT * FROM drainer.enqueue('quiet', $1, 't', '', '{}')`, "step-"+itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	// The workers finish; the daemon finds nothing due and waits for the
	// gate's lock, which the open transaction holds shared. Once every
	// worker is free, the wait is asked for again (a new transaction of
	// the gate's): the claim loop has nothing left to be told by them.
	releaseBusy()
	var first time.Time
	testkit.WaitFor(t, wakeTestWait, "every worker free and the gate waiting for the producer's transaction", func() (bool, string) {
		first = gateWaitStart(t, pool)
		return countByStatus(t, pool)["succeeded"] == workers && !first.IsZero(), ""
	})
	testkit.WaitFor(t, wakeTestWait, "the gate asking for its lock again", func() (bool, string) {
		at := gateWaitStart(t, pool)
		return !at.IsZero() && !at.Equal(first), ""
	})
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The claim after arming brings the quiet rows (enough to give the slot
	// back); with them in flight and nothing more due, the daemon sleeps
	// and must hold its slot again.
	testkit.WaitFor(t, wakeTestWait, "the quiet rows in flight and the slot held again", func() (bool, string) {
		return countByStatus(t, pool)["in_flight"] == quiet && gateLock(t, pool, true), ""
	})
	releaseHeld()
	testkit.WaitFor(t, wakeTestWait, "the quiet rows succeeded", func() (bool, string) {
		return countByStatus(t, pool)["succeeded"] == workers+quiet, ""
	})
	for i := range 3 {
		dispatchedByWakeUp(t, e, pool, "next-"+itoa(i), "row "+itoa(i)+" after the large claim")
	}
}

// TestOrderedScopeNextRowIsWoken: the rows of a tool ordered per
// business_scope go out one at a time, each claimable only once the one
// before it settled. The completion that settles it wakes the claim loop,
// so the next row goes out at once, never on the poll: before, a scope of
// n rows took n polls (a second each, by default).
func TestOrderedScopeNextRowIsWoken(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	var sent atomic.Int64
	a := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		sent.Add(1)
		return dispatch.Result{Outcome: dispatch.Success}
	})
	e := startWithHooks(t, pool, testRouting(t, map[string]dispatch.Adapter{"ledger_post": a},
		&Route{Tool: "ledger_post", Ordering: outbox.OrderingBusinessScope}), Config{Workers: 4}, wakeHooks{})
	for i := range 4 {
		if _, err := pool.Exec(t.Context(), "SELECT drainer.enqueue('run-ordered', $1, 'ledger_post', 'acct:a', '{}')", "s"+itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, wakeTestWait, "the scope's four rows succeeded", func() (bool, string) {
		return countByStatus(t, pool)[outbox.StatusSucceeded] == 4, ""
	})
	if n := polled(e); n > 0 || sent.Load() != 4 {
		t.Fatalf("%d of the scope's rows claimed by the poll, %d sent (claims by cause %v)", n, sent.Load(), e.ClaimedRows())
	}
}

// TestStaleSlotWakeIsSkipped: a worker that finishes while a claim runs
// wakes the claim loop for its slot; when that claim then finds fewer due
// rows than free slots, the loop skips the wake instead of claiming again
// (in bench's light-load phase four in five such claims found nothing).
// Rows committed afterwards are still woken by their notification.
//
// Each try holds one row's call until the claim that a second row's
// notification leads to is about to run; that claim finds one row for
// three free slots. Another wake-up can come in between now and then (the
// wake gate's own claim, taken before the second row committed, whose
// notification then wakes the loop again), so up to three tries are made:
// without the skip, none of them skips a wake.
func TestStaleSlotWakeIsSkipped(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	var mu sync.Mutex
	blocks := map[string]chan struct{}{} // run -> its call's release
	a := dispatch.AdapterFunc(func(ctx context.Context, m *dispatch.Message) dispatch.Result {
		mu.Lock()
		block := blocks[m.Tuple.AgentRunID]
		mu.Unlock()
		if block != nil {
			select {
			case <-block:
			case <-ctx.Done():
			}
		}
		return dispatch.Result{Outcome: dispatch.Success}
	})
	var armed atomic.Pointer[func()]
	var e *Engine
	hooks := wakeHooks{claiming: func(cause claimCause) {
		if cause != causeNotify {
			return
		}
		if release := armed.Swap(nil); release != nil {
			(*release)() // the held call ends during this claim
			for deadline := time.Now().Add(wakeTestWait); len(e.wake) == 0 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
		}
	}}
	e = startWithHooks(t, pool, testRouting(t, map[string]dispatch.Adapter{"t": a}, &Route{Tool: "t"}), Config{Workers: 4}, hooks)
	var seen []string
	for try := range 3 {
		held := fmt.Sprintf("held-%d", try)
		block := make(chan struct{})
		var once sync.Once
		release := func() { once.Do(func() { close(block) }) }
		mu.Lock()
		blocks[held] = block
		mu.Unlock()
		heldKey := enqueueN(t, pool, held, "t", 1)[0]
		testkit.WaitFor(t, wakeTestWait, "the held row in flight", func() (bool, string) {
			return getRow(t, pool, heldKey).Status == outbox.StatusInFlight, ""
		})
		before := e.staleSlotWakes.Load()
		armed.Store(&release)
		second := enqueueN(t, pool, fmt.Sprintf("second-%d", try), "t", 1)[0]
		testkit.WaitFor(t, wakeTestWait, "the second row succeeded", func() (bool, string) {
			return getRow(t, pool, second).Status == outbox.StatusSucceeded, ""
		})
		fired := armed.Swap(nil) == nil
		release()
		testkit.WaitFor(t, wakeTestWait, "the held row succeeded", func() (bool, string) {
			return getRow(t, pool, heldKey).Status == outbox.StatusSucceeded, ""
		})
		if fired && e.staleSlotWakes.Load() > before {
			dispatchedByWakeUp(t, e, pool, "third", "a row enqueued after the skipped wake")
			return
		}
		seen = append(seen, fmt.Sprintf("try %d: hook ran %v, stale wakes skipped %d", try+1, fired, e.staleSlotWakes.Load()-before))
	}
	t.Fatalf("no stale slot wake skipped in three tries (%s); claims by cause %v", strings.Join(seen, "; "), e.ClaimedRows())
}

// TestRetryIsClaimedWhenDue: a row rescheduled after a failed attempt is
// claimed when its backoff ends, woken by the engine that rescheduled it,
// not by the poll: with a poll of a minute, a row that fails twice with a
// backoff of at most 100 ms succeeds on its third attempt with no claim
// of the poll's. Before, every retry waited for a poll (with the default
// second, the poll also gathered the jittered retries of many rows into
// one tick).
func TestRetryIsClaimedWhenDue(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	var calls atomic.Int64
	a := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		if calls.Add(1) <= 2 {
			return dispatch.Result{Outcome: dispatch.Retry, Err: errors.New("busy")}
		}
		return dispatch.Result{Outcome: dispatch.Success}
	})
	e := startWithHooks(t, pool, testRouting(t, map[string]dispatch.Adapter{"t": a},
		&Route{Tool: "t", MaxAttempts: 5, Backoff: Backoff{Base: 50 * time.Millisecond, Cap: 100 * time.Millisecond}}), Config{Workers: 4}, wakeHooks{})
	key := enqueueN(t, pool, "retried", "t", 1)[0]
	testkit.WaitFor(t, wakeTestWait, "the row succeeded on its third attempt", func() (bool, string) {
		return getRow(t, pool, key).Status == outbox.StatusSucceeded, ""
	})
	// On a machine loaded past its cores, another cause (a wake-up re-armed
	// after its connection was slow to answer) may claim a retry just as
	// its timer fires; the poll never may, and at least one retry is the
	// timer's.
	got := e.ClaimedRows()
	if calls.Load() != 3 || polled(e) != 0 || got["retry"] < 1 || got["retry"]+got["rearm"]+got["signal"]+got["slots"] < 2 {
		t.Fatalf("%d calls; claims by cause %v: want 3 calls, the retries claimed on their timers, none by the poll", calls.Load(), got)
	}
}
