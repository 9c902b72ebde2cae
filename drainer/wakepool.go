package drainer

import (
	"context"
	"time"
)

// The wake gate with Config.ListenPooled: a fleet's engine may hold no
// connection beyond its pool, yet an idle database should not wait for the
// poll. While the daemon sleeps it borrows one connection of its pool, on
// which it LISTENs and holds its wake-gate seat; when it is busy (a claim
// brought a batch) it gives the connection back, so the pool's every
// connection serves claims and completions. A busy daemon needs no
// notification: it claims again as soon as slots free.
//
// The connection is used by one goroutine at a time: the claim loop runs
// the gate's statements on it; in between, a waiter goroutine reads its
// notifications, and is stopped (its read interrupted by the context's
// deadline, which leaves the connection usable) before the next statement.

// armPooled borrows a connection (unless one is held), listens and takes a
// seat; on gateHeld and gateOther the waiter reads the notifications until
// the next arm, disarm or close.
func (g *wakeGate) armPooled(ctx context.Context) gateState {
	if g.slot >= 0 && !g.broken.Load() {
		return gateKept
	}
	g.stopWaiter()
	if g.broken.Load() {
		g.dropPooled()
	}
	if g.pooled == nil {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		c, err := g.e.pool.Acquire(actx)
		cancel()
		if err != nil {
			g.e.log.Debug("wake gate: no pool connection; polling", "err", err)
			return gateDown
		}
		g.pooled, g.conn = c, c.Conn()
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = g.conn.Exec(lctx, g.e.listenSQL())
		cancel()
		if err != nil {
			g.fail(err)
			return gateDown
		}
	}
	ctx, cancel := context.WithTimeout(ctx, wakeHoldWait+5*time.Second)
	defer cancel()
	if g.slot < 0 {
		slot, err := g.e.st.TakeWakeSeat(ctx, g.conn)
		if err != nil {
			g.fail(err)
			return gateDown
		}
		if slot < 0 {
			// Every seat is taken by other sleeping daemons: producers
			// notify, and this one hears them too.
			g.startWaiter()
			return gateOther
		}
		held, err := g.e.st.HoldWake(ctx, g.conn, slot, wakeHoldWait)
		if err != nil {
			g.fail(err)
			return gateDown
		}
		if !held {
			g.startWaiter()
			return gateBusy
		}
		g.slot = slot
	}
	g.startWaiter()
	return gateHeld
}

// startWaiter reads the held connection's notifications in a goroutine.
func (g *wakeGate) startWaiter() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	g.waitCancel, g.waitDone = cancel, done
	conn := g.conn
	go func() {
		defer close(done)
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				if ctx.Err() == nil {
					// The connection is gone: the poll covers the gap; the
					// next arm borrows another.
					g.broken.Store(true)
					g.e.log.Debug("wake gate: listening connection lost; polling", "err", err)
					g.e.signalFull()
				}
				return
			}
			g.e.notified(n)
		}
	}()
}

// stopWaiter interrupts the waiter and waits for it to return.
func (g *wakeGate) stopWaiter() {
	if g.waitCancel == nil {
		return
	}
	g.waitCancel()
	<-g.waitDone
	g.waitCancel, g.waitDone = nil, nil
}

// givePooled gives the seat and the connection back to the pool: the
// daemon is busy. A connection that cannot be cleaned (the seat released,
// the listening ended) is closed instead, which ends both with its session.
func (g *wakeGate) givePooled() {
	if g.pooled == nil {
		return
	}
	g.stopWaiter()
	if g.broken.Load() {
		g.dropPooled()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if g.slot >= 0 {
		if err := g.e.st.ReleaseWake(ctx, g.conn, g.slot); err != nil {
			g.fail(err)
			return
		}
		g.slot = -1
	}
	if _, err := g.conn.Exec(ctx, "UNLISTEN *"); err != nil {
		g.fail(err)
		return
	}
	g.pooled.Release()
	g.pooled, g.conn = nil, nil
}

// dropPooled closes the borrowed connection (the pool replaces it): its
// seat and its listening end with its session.
func (g *wakeGate) dropPooled() {
	g.stopWaiter()
	if g.pooled != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = g.conn.Close(ctx)
		cancel()
		g.pooled.Release()
	}
	g.pooled, g.conn = nil, nil
	g.slot = -1
	g.broken.Store(false)
}
