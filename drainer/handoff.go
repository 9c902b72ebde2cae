package drainer

import (
	"context"
	"time"

	"github.com/drainer-io/drainer/store"
)

// Take leases the row of key, when a worker slot is free and the row is due
// and claimable (not held by its scope's order, its tool not being
// deferred), and dispatches it at once, as if a claim had brought it: the
// MCP gateway hands over the call it just recorded, so the call does not
// wait for the notification, the wake-up and a claim of the whole queue
// (docs/architecture.md, "The gateway's hand-off"). It reports whether it
// took the row. When it does not, nothing changed: the row drains as any
// other (another replica may have claimed it already; a database error is
// logged).
//
// The lease is the same as a claim's (store.ClaimKey: the same checks, the
// same fence), so a row is never leased twice; the slot is reserved before
// the lease, so the engine never holds more rows than Workers. The row
// counts under the notify cause of drainer_claimed_rows_total: the call
// is its notification.
func (e *Engine) Take(_ context.Context, key string) bool {
	if !e.started.Load() {
		return false
	}
	// Stop waits for a Take under way before it waits for the workers.
	e.takeMu.RLock()
	defer e.takeMu.RUnlock()
	if e.fetchCtx.Err() != nil {
		return false
	}
	if e.inFlightBytes.Load() >= e.cfg.MaxInFlightBytes || e.reserveSlots(1) == 0 {
		return false
	}
	claimedAt := time.Now()
	rt := e.useRouting()
	ctx, cancel := context.WithTimeout(e.writes, claimTimeout) // as the claim loop's (claimer.go)
	row, err := e.st.ClaimKey(ctx, e.pool, key, store.Claim{Lease: e.cfg.Lease, Replica: e.cfg.ReplicaID,
		Ordered: rt.orderedTools, Excluded: e.deferrer.excludedTools(), Durable: rt.durableClaims})
	cancel()
	if err != nil || row == nil {
		rt.done()
		e.freeSlot()
		if err != nil && !isShutdown(e.fetchCtx, err) && e.db.failed("claim", claimedAt, err) {
			e.log.Warn("gateway hand-off: claim failed; the row drains as any other", "err", err)
		}
		return false
	}
	if e.startRows([]store.ClaimedRow{*row}, rt, causeNotify, claimedAt) == 0 {
		e.freeSlot()
	}
	rt.done()
	e.metrics.WorkersBusy.Set(float64(e.active.Load()))
	return true
}

// reserveSlots takes up to want worker slots, as many as are free, and
// returns how many it took: the claim loop takes them before its claim and
// Take before its lease, so that together they never lease more rows than
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

// freeSlot gives back the slot Take reserved and no worker used, and tells
// the claim loop if it waits for one.
func (e *Engine) freeSlot() {
	e.releaseSlots(1)
	if e.slotsWanted.Load() {
		e.signal()
	}
}
