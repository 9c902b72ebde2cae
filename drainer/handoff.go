package drainer

import (
	"context"
	"fmt"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
)

// Lease runs lease, which leases one row with a claim's settings (c: the
// same checks, the same fence) and returns it, when a worker slot is free,
// and dispatches the row it returns at once, as if a claim had brought it.
// The MCP gateway records each call with it, leasing the call's row in the
// transaction that records it (store.EnqueueLeasedBatch, with the calls
// arriving meanwhile), so the call does not wait for a notification, a
// wake-up and a claim of the whole queue (docs/architecture.md, "The
// gateway's hand-off").
//
// ran says whether lease ran; when it did not (no worker slot free, too
// many payload bytes in flight, the engine not running or stopping), the
// caller does what lease would have done without the lease. err is
// lease's, for the caller to report. A row lease did not return (none
// leased, or an error) leaves nothing changed here: it drains as any other.
//
// The slot is reserved before the lease, so the engine never holds more
// rows than Workers; Stop waits for a Lease under way before it waits for
// the workers, and lease runs within ctx, claimTimeout and the engine's
// writes. The row counts under the notify cause of
// drainer_claimed_rows_total: the call is its notification.
func (e *Engine) Lease(ctx context.Context, lease func(ctx context.Context, c store.Claim) (*store.ClaimedRow, error)) (ran bool, err error) {
	if !e.started.Load() {
		return false, nil
	}
	// Stop waits for a Lease under way before it waits for the workers.
	e.takeMu.RLock()
	defer e.takeMu.RUnlock()
	if e.fetchCtx.Err() != nil {
		return false, nil
	}
	if e.inFlightBytes.Load() >= e.cfg.MaxInFlightBytes || e.reserveSlots(1) == 0 {
		return false, nil
	}
	claimedAt := time.Now()
	rt := e.useRouting()
	lctx, cancel := context.WithTimeout(ctx, claimTimeout) // as the claim loop's (claimer.go)
	stop := context.AfterFunc(e.writes, cancel)
	row, err := lease(lctx, store.Claim{Lease: e.cfg.Lease, Replica: e.cfg.ReplicaID,
		Ordered: rt.orderedTools, Routed: rt.routedTools, Excluded: e.deferrer.excludedTools(), Only: e.deferrer.onlyTools(), Durable: rt.durableClaims})
	stop()
	cancel()
	if err != nil || row == nil {
		// lease's error is its caller's to report (the gateway's record
		// of a call: a conflict is the agent's, not the database's).
		rt.done()
		e.freeSlot()
		return true, err
	}
	if e.startRows([]store.ClaimedRow{*row}, rt, causeNotify, claimedAt) == 0 {
		e.freeSlot()
	}
	rt.done()
	e.metrics.WorkersBusy.Set(float64(e.active.Load()))
	return true, nil
}

// Writing returns, while this engine writes the completion of the row
// seq, a channel closed once the write ended and the rows it settled were
// told to Config.Settled; nil when it writes none of that row now. The
// gateway, woken by the settle notification of a row it leased here, waits
// for it instead of reading the row back: the notification is then most
// likely of this very write, whose news follows (a row the write did not
// settle, lost to its fence, gets no news, and is read once the channel
// closes).
func (e *Engine) Writing(seq int64) <-chan struct{} {
	return e.completer.writing(seq)
}

// reserveSlots takes up to want worker slots, as many as are free, and
// returns how many it took: the claim loop takes them before its claim and
// Lease before its lease, so that together they never lease more rows than
// Workers.
func (e *Engine) reserveSlots(want int) int {
	for {
		busy := e.active.Load()
		n := min(want, e.cfg.Workers-int(busy))
		if n <= 0 {
			return 0
		}
		if e.active.CompareAndSwap(busy, busy+int64(n)) {
			return n
		}
	}
}

// releaseSlots gives back n slots reserveSlots took and no worker used.
func (e *Engine) releaseSlots(n int) {
	if n > 0 {
		e.active.Add(-int64(n))
	}
}

// freeSlot gives back the slot Lease reserved and no worker used, and tells
// the claim loop if it waits for one.
func (e *Engine) freeSlot() {
	e.releaseSlots(1)
	if e.slotsWanted.Load() {
		e.signal()
	}
}

// Routed says why the loaded config does not route tool (nil: it does):
// the MCP gateway records no call of a tool a reload removed.
func (e *Engine) Routed(tool string) error {
	rt := e.useRouting()
	defer rt.done()
	_, err := rt.routeOf(tool)
	return err
}

// routeOf is tool's route under rt, or the error the gateway's agent is
// shown when there is none.
func (rt *Routing) routeOf(tool string) (*Route, error) {
	route, ok := rt.Routes[tool]
	if !ok {
		return nil, fmt.Errorf("tool %q has no route in the loaded config", tool)
	}
	return route, nil
}

// Admit lets a call of tool that the MCP gateway passes straight through
// (a read-only naturally idempotent tool: never recorded) through what a
// row of the tool's route passes before it is sent: the pauses of `drainer
// pause` (the route's and its adapter's) and the adapter's gate (circuit
// breaker, rate_limit, max_concurrency, auth hold). It waits for a slot or
// a rate token as a row would (Config.GateWait), and no longer than ctx.
// Admitted, it returns done, to be called once with the call's result: the
// breaker and the auth hold learn from it, and the slot is given back.
// Otherwise the call must not be sent, and the error says why in words the
// agent is shown.
func (e *Engine) Admit(ctx context.Context, tool string) (done func(dispatch.Result), err error) {
	rt := e.useRouting()
	defer rt.done()
	route, err := rt.routeOf(tool)
	if err != nil {
		return nil, err
	}
	entry, ok := rt.Registry.Get(route.Adapter)
	if !ok {
		return nil, fmt.Errorf("route %q names adapter %q, which the loaded config does not have", tool, route.Adapter)
	}
	if paused(e.pauses.Load(), route, entry.Name) {
		return nil, fmt.Errorf("paused by an operator (route %q or adapter %q)", tool, entry.Name)
	}
	maxWait := e.cfg.GateWait
	if dl, ok := ctx.Deadline(); ok {
		maxWait = max(0, min(maxWait, time.Until(dl)))
	}
	g := rt.gates[entry.Name]
	e.rngMu.Lock()
	done, wait, ref := g.admitWithin(e.rng, tool, maxWait, false)
	e.rngMu.Unlock()
	if ref != nil && ref.reason == outbox.RefusedSaturated {
		start := time.Now()
		if g.waitSlot(ctx, maxWait) {
			e.rngMu.Lock()
			done, wait, ref = g.admitWithin(e.rng, tool, max(0, maxWait-time.Since(start)), true)
			e.rngMu.Unlock()
		}
	}
	if ref != nil {
		return nil, fmt.Errorf("adapter %q %s", entry.Name, refusalText[ref.reason])
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			done(dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Reason: dispatch.ReasonCancelled})
			return nil, fmt.Errorf("the call ended while it waited for a rate token of adapter %q", entry.Name)
		}
	}
	return done, nil
}
