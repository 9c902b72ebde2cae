package drainer

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/drainer-io/drainer/internal/maintenance"
	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5"
)

// The wake-up's timings.
const (
	// wakeHoldWait bounds one wait for the wake lock: the producers that
	// enqueued without notifying are still committing. The gate asks again
	// at once if it still wants the lock, keeping its seat; meanwhile the
	// claim loop claims as usual (producers that find the lock wanted
	// notify).
	wakeHoldWait = time.Second
	// wakeCheckEvery is how long a wake-up connection (the gate's, the
	// listener's) may stay quiet before it is pinged: a connection the
	// network dropped without a word is noticed within this plus
	// wakePingWait. One the server closed (a restart, an idle-session
	// timeout, pg_terminate_backend) is noticed at once.
	wakeCheckEvery = 10 * time.Second
	wakePingWait   = 5 * time.Second
	// wakeReadyWait bounds how long Start waits for the wake-up's
	// connections.
	wakeReadyWait = 10 * time.Second
	// wakeRetryMax caps the back-off between attempts to connect, or to
	// find a free seat.
	wakeRetryMax = 5 * time.Second
	// wakeHealthy: a wake-up connection that lived this long was healthy,
	// and the back-off starts again from nothing when it fails. One that
	// fails sooner (a session killed as soon as it is opened, a statement
	// that always fails) keeps backing off: without this, every successful
	// connect reset it, and such a connection was opened again at once, in
	// a loop, exactly when the database was struggling.
	wakeHealthy = 5 * time.Second
)

// wakeGate is the daemon's side of the outbox's wake gate
// (migrations/code/functions/notify_outbox.sql): while the claim loop
// sleeps it holds a slot, so producers notify; while the loop is busy it
// holds none, so producers skip the notification and its
// commit-serialising lock.
//
// The claim loop only says what it wants (want): the gate's own goroutine
// (run) connects, takes a seat, waits for the wake lock (for the producers
// that enqueued without notifying to commit), and then tells the claim loop
// to claim once from the first due row, which finds those producers' rows.
// The claim loop never waits for any of it: a connect that takes seconds on
// a loaded server, or a producer's transaction left open, delays no
// notified row. While the gate holds nothing else to do it watches its
// connection: one that died (its locks died with it) is replaced and the
// slot taken again, followed by the same claim.
type wakeGate struct {
	e *Engine

	mu        sync.Mutex
	wanted    bool               // the claim loop sleeps: hold a slot
	interrupt context.CancelFunc // ends run's current watch, when set
	kick      chan struct{}      // wanted changed

	ready     chan struct{} // closed once first connected
	readyOnce sync.Once

	// Owned by run.
	conn  *pgx.Conn
	heard time.Time // conn's last sign of life: its failure is not older
	born  time.Time // when conn was opened (wakeHealthy)
	slot  int       // taken seat, -1 when none
	hold  bool      // slot's wake lock is held
}

// wakeHooks let tests stop the wake-up at a chosen point. Nil fields (as
// in production) do nothing.
type wakeHooks struct {
	// hold runs once the gate has taken a seat, before it asks for the
	// wake lock.
	hold func(ctx context.Context)
	// claiming runs in the claim loop before each claim's statement, with
	// the cause of the wake-up that led to it.
	claiming func(claimCause)
}

func newWakeGate(e *Engine) *wakeGate {
	return &wakeGate{e: e, slot: -1, kick: make(chan struct{}, 1), ready: make(chan struct{})}
}

// service runs the gate (not with PollOnly: the engine holds no connection
// of its own).
func (g *wakeGate) service() maintenance.Service {
	return &maintenance.Loop{Name: "wake gate", Run: g.run}
}

// want says whether the claim loop sleeps (hold a slot) or is busy (give it
// back). It never waits; it is cheap when nothing changes.
func (g *wakeGate) want(sleeping bool) {
	g.mu.Lock()
	if g.wanted == sleeping {
		g.mu.Unlock()
		return
	}
	g.wanted = sleeping
	if g.interrupt != nil {
		g.interrupt()
	}
	g.mu.Unlock()
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

func (g *wakeGate) isWanted() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.wanted
}

// run keeps the gate in the state the claim loop wants until ctx ends,
// then closes the connection (and with it every lock). It connects at
// once, whatever the claim loop wants, so that arming is a matter of two
// round trips when it does.
func (g *wakeGate) run(ctx context.Context) {
	defer g.close()
	retry := time.Duration(0)
	for ctx.Err() == nil {
		var err error
		wanted := g.isWanted()
		sent := time.Now() // a connect's failure dates from its attempt
		if g.conn != nil {
			sent = g.heard // any other step's, from the connection's last sign of life
		}
		switch {
		case g.conn == nil:
			err = g.connect(ctx)
		case wanted && !g.hold:
			err = g.arm(ctx)
		case !wanted && g.slot >= 0:
			err = g.disarm(ctx)
		default:
			err = g.watch(ctx)
		}
		if g.conn != nil && time.Since(g.born) >= wakeHealthy {
			retry = 0 // a connection that lived: any failure is news
		}
		switch {
		case err == nil:
			continue
		case ctx.Err() != nil:
			return
		case errors.Is(err, errNoSeat):
			g.e.log.Debug("wake gate: every seat is taken by other sleeping daemons; their notifications wake this one too")
		default:
			g.fail(sent, err)
		}
		if !g.pause(ctx, retry) {
			return
		}
		retry = min(max(2*retry, 50*time.Millisecond), wakeRetryMax)
	}
}

// connect opens the gate's connection.
func (g *wakeGate) connect(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	conn, err := store.ConnectBeside(cctx, g.e.pool, "wake")
	cancel()
	if err != nil {
		return err
	}
	g.conn, g.heard, g.born = conn, time.Now(), time.Now()
	g.readyOnce.Do(func() { close(g.ready) })
	return nil
}

// errNoSeat: every seat of the gate is taken by other daemons.
var errNoSeat = errors.New("wake gate: no free seat")

// arm takes a seat and its wake lock on the gate's connection; once held
// it has the claim loop claim from the first due row (every producer that
// skipped its notification has committed by then). A lock still wanted by
// open producer transactions is asked for again, keeping the seat, while
// the claim loop still wants it.
func (g *wakeGate) arm(ctx context.Context) error {
	if g.slot < 0 {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		slot, err := g.e.st.TakeWakeSeat(sctx, g.conn)
		cancel()
		if err != nil {
			return err
		}
		g.heard = time.Now()
		if slot < 0 {
			return errNoSeat
		}
		g.slot = slot
		if h := g.e.hooks.hold; h != nil {
			h(ctx)
		}
	}
	hctx, cancel := context.WithTimeout(ctx, wakeHoldWait+wakePingWait)
	held, err := g.e.st.HoldWake(hctx, g.conn, g.slot, wakeHoldWait)
	cancel()
	if err != nil {
		return err
	}
	g.heard = time.Now()
	if !held {
		return nil // the loop asks again, or gives the seat back
	}
	g.hold = true
	if g.isWanted() {
		g.e.floor.wantFull()
		g.e.wakeFor(causeRearm)
	}
	return nil
}

// disarm gives the slot back: the claim loop is busy, producers need not
// notify.
func (g *wakeGate) disarm(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if g.hold {
		if err := g.e.st.ReleaseWake(ctx, g.conn, g.slot); err != nil {
			return err
		}
	} else if err := g.e.st.ReleaseWakeSeat(ctx, g.conn, g.slot); err != nil {
		return err
	}
	g.slot, g.hold, g.heard = -1, false, time.Now()
	return nil
}

// watch waits on the connection until the claim loop wants something else
// or the connection dies, pinging it when it stays quiet for
// wakeCheckEvery. It reports a dead connection as an error.
func (g *wakeGate) watch(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, wakeCheckEvery)
	g.mu.Lock()
	g.interrupt = cancel
	wanted := g.wanted
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.interrupt = nil
		g.mu.Unlock()
		cancel()
	}()
	if wanted && !g.hold || !wanted && g.slot >= 0 {
		return nil // wanted otherwise before the interrupt was in place
	}
	select {
	case <-g.kick: // drained: the wait below is cancelled by want instead
	default:
	}
	_, err := g.conn.WaitForNotification(wctx)
	switch {
	case err == nil:
		g.heard = time.Now()
		return nil
	case ctx.Err() != nil:
		return nil
	case !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled):
		return err
	case wctx.Err() == context.DeadlineExceeded:
		pctx, cancel := context.WithTimeout(ctx, wakePingWait)
		defer cancel()
		if err := g.conn.Ping(pctx); err != nil {
			return err
		}
		g.heard = time.Now()
		return nil
	}
	return nil // interrupted by want
}

// pause waits d, or until the claim loop wants something else.
func (g *wakeGate) pause(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-g.kick:
	case <-ctx.Done():
		return false
	}
	return true
}

// fail drops the connection, and with it any lock it held: producers stop
// notifying for this daemon until the gate is armed again.
func (g *wakeGate) fail(sent time.Time, err error) {
	if g.e.db.failed("wake gate", sent, err) {
		g.e.log.Warn("wake gate: connection lost; taking the gate again", "err", err)
	}
	g.close()
}

func (g *wakeGate) close() {
	if g.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = g.conn.Close(ctx)
		cancel()
		g.conn = nil
	}
	g.slot, g.hold = -1, false
}

// awaitWakeUp waits until the listener listens and the wake gate is
// connected, so that rows enqueued once Start has returned are woken, not
// polled: connecting can take seconds on a busy server, and the claim loop
// never waits for it. Past wakeReadyWait (the server refuses connections)
// the engine starts on its poll while the wake-up goes on trying.
func (e *Engine) awaitWakeUp(ctx context.Context) {
	t := time.NewTimer(wakeReadyWait)
	defer t.Stop()
	for _, ready := range []chan struct{}{e.listening, e.gate.ready} {
		select {
		case <-ready:
		case <-ctx.Done():
			return
		case <-t.C:
			e.log.Warn("wake-up not connected yet; claiming on the poll until it is", "waited", wakeReadyWait)
			return
		}
	}
}
