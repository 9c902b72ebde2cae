package drainer

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// wakeHoldWait bounds how long a daemon about to sleep waits for the
// producers that enqueued without notifying to commit. Past it (a producer's
// transaction is still open) the daemon does not sleep: it claims again
// after wakeRetry, until it can hold the gate.
const (
	wakeHoldWait = 200 * time.Millisecond
	wakeRetry    = 20 * time.Millisecond
)

// wakeGate is the daemon's side of the outbox's wake gate
// (migrations/013_wake_gate.sql): while it sleeps it holds a slot, so
// producers notify; while it is busy it holds none, so producers skip the
// notification and its commit-serialising lock. Only the claim loop uses
// it. Its connection is its own: the locks are session-level and end with
// it, so a lost connection never leaves a slot held.
type wakeGate struct {
	e    *Engine
	conn *pgx.Conn
	slot int // held slot, -1 when none
}

// gateState is what arm found.
type gateState int

const (
	gateKept  gateState = iota // still holding the slot taken before
	gateHeld                   // just took a slot: producers notify
	gateOther                  // every seat is taken by other sleeping daemons: they are notified, and so is this one
	gateBusy                   // a producer's transaction is still open: claim again soon
	gateDown                   // no connection: fall back on the poll
)

func newWakeGate(e *Engine) *wakeGate { return &wakeGate{e: e, slot: -1} }

// arm takes a slot before the daemon sleeps. On gateHeld every producer
// that skipped its notification has committed: the caller must claim once
// more, from the first due row, before sleeping.
func (g *wakeGate) arm(ctx context.Context) gateState {
	if g.slot >= 0 {
		return gateKept
	}
	if g.e.cfg.PollOnly {
		return gateDown
	}
	if g.conn == nil {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := pgx.ConnectConfig(cctx, g.e.pool.Config().ConnConfig.Copy())
		cancel()
		if err != nil {
			g.e.log.Debug("wake gate: cannot connect; polling", "err", err)
			return gateDown
		}
		g.conn = conn
	}
	ctx, cancel := context.WithTimeout(ctx, wakeHoldWait+5*time.Second)
	defer cancel()
	slot, err := g.e.st.TakeWakeSeat(ctx, g.conn)
	if err != nil {
		g.fail(err)
		return gateDown
	}
	if slot < 0 {
		return gateOther
	}
	held, err := g.e.st.HoldWake(ctx, g.conn, slot, wakeHoldWait)
	if err != nil {
		g.fail(err)
		return gateDown
	}
	if !held {
		return gateBusy
	}
	g.slot = slot
	return gateHeld
}

// disarm gives the slot back: the daemon is busy, producers need not notify.
func (g *wakeGate) disarm() {
	if g.slot < 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.e.st.ReleaseWake(ctx, g.conn, g.slot); err != nil {
		g.fail(err)
		return
	}
	g.slot = -1
}

// fail drops the connection, and with it any lock it held.
func (g *wakeGate) fail(err error) {
	g.e.log.Debug("wake gate: connection dropped; polling until it is back", "err", err)
	g.close()
}

func (g *wakeGate) close() {
	if g.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = g.conn.Close(ctx)
		cancel()
		g.conn = nil
	}
	g.slot = -1
}
