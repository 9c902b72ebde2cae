package drainer

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
)

// claimLoop leases due rows whenever worker slots are free: on a
// notification, when a slot frees, and at least every PollInterval.
func (e *Engine) claimLoop() {
	defer e.loops.Done()
	defer close(e.claimDone)
	poll := time.NewTicker(e.cfg.PollInterval)
	defer poll.Stop()
	gate := newWakeGate(e)
	defer gate.close()
	errDelay := 100 * time.Millisecond
	for {
		soon, err := e.claimThenArm(gate)
		if err != nil {
			if isShutdown(e.fetchCtx, err) {
				return
			}
			e.log.Warn("claim failed; retrying", "err", err, "retry_in", errDelay)
			if !sleep(e.fetchCtx, errDelay) {
				return
			}
			errDelay = min(errDelay*2, 5*time.Second)
			continue
		}
		errDelay = 100 * time.Millisecond
		select {
		case <-e.fetchCtx.Done():
			return
		case <-poll.C:
		case <-soon:
		case <-e.wake:
			// Under load slots free one by one; let them accumulate for a
			// moment so a claim (one durable commit) leases a full batch
			// rather than a row or two.
			if free := e.cfg.Workers - int(e.active.Load()); free < e.cfg.BatchSize {
				t := time.NewTimer(e.cfg.FetchCooldown)
				select {
				case <-e.batchFree:
				case <-t.C:
				case <-e.fetchCtx.Done():
				}
				t.Stop()
			}
		}
	}
}

// claimThenArm claims while slots are free and rows are due; when no row
// was due it arms the wake gate before the loop sleeps, so that producers
// notify (see wakeGate), and, having just armed it, claims once more from
// the first due row: the rows of producers that skipped their notification
// while this daemon was busy. The channel it returns, when not nil, asks for
// another look soon (a producer's transaction was still open).
func (e *Engine) claimThenArm(gate *wakeGate) (<-chan time.Time, error) {
	idle, err := e.claimWhileFree(gate)
	if err != nil || !idle || e.fetchCtx.Err() != nil {
		return nil, err
	}
	if !e.mark.wasFull {
		// A row whose transaction committed after later rows were claimed
		// lies behind the mark, where only a pass from the first due row
		// finds it: make one before sleeping, at most every fullPassMinGap
		// (until then, sleep no longer than the gap).
		if wait := fullPassMinGap - time.Since(e.mark.lastFull); wait > 0 {
			return time.After(wait), nil
		}
		e.mark.fullNext = true
		if idle, err = e.claimWhileFree(gate); err != nil || !idle || e.fetchCtx.Err() != nil {
			return nil, err
		}
	}
	switch gate.arm(e.fetchCtx) {
	case gateHeld:
		e.mark.fullNext = true
		_, err = e.claimWhileFree(gate)
		return nil, err
	case gateBusy:
		return time.After(wakeRetry), nil
	}
	return nil, nil
}

// claimWhileFree claims until no slot is free or no row is due, and
// reports the latter (idle). It never leases more rows than free slots: a
// row waiting in memory would let its lease lapse and another replica send
// it again. A claim that brings rows disarms the wake gate.
func (e *Engine) claimWhileFree(gate *wakeGate) (idle bool, err error) {
	for e.fetchCtx.Err() == nil {
		free := e.cfg.Workers - int(e.active.Load())
		if free <= 0 {
			return false, nil // a finishing worker signals
		}
		n := min(free, e.cfg.BatchSize)
		claimedAt := time.Now()
		rt := e.useRouting()
		// The claim itself is not cancelled by Stop: a statement cut off after
		// committing would strand its rows until their lease expires.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(e.fetchCtx), 30*time.Second)
		claim := store.Claim{Limit: n, Lease: e.cfg.Lease, Replica: e.cfg.ReplicaID,
			Ordered: rt.orderedTools, Excluded: e.deferrer.excludedTools(), Durable: rt.durableClaims}
		claim.After = e.mark.start(claim)
		rows, err := e.st.Claim(ctx, e.pool, claim)
		cancel()
		if err != nil {
			rt.done()
			return false, err
		}
		if len(rows) > 0 {
			gate.disarm()
		}
		e.mark.advance(rows, n)
		e.metrics.ClaimBatchSize.Observe(float64(len(rows)))
		for i := range rows {
			row := &rows[i]
			route, entry, c := e.preflight(row, rt)
			if c != nil {
				e.finish(c)
				continue
			}
			e.active.Add(1)
			e.workers.Add(1)
			rt.share()
			go e.work(row, rt, route, entry, claimedAt)
		}
		rt.done()
		e.metrics.WorkersBusy.Set(float64(e.active.Load()))
		if len(rows) < n && !e.mark.fullNext {
			return true, nil // nothing more is due, and no full pass is owed
		}
		if e.cfg.Workers-int(e.active.Load()) < e.cfg.BatchSize {
			// Too few slots are free to be worth a commit: a finishing
			// worker (or the poll) brings us back.
			return false, nil
		}
	}
	return false, nil
}

// fullPassEvery is how often a claim starts from the first due row rather
// than at the low-water mark.
const fullPassEvery = 2 * time.Second

// fullPassMinGap bounds how often a short claim at the mark triggers a full
// pass: at most one per gap, so a replica does not re-read the due index's
// dead prefix (long while a snapshot holds back vacuum) on every claim.
const fullPassMinGap = 100 * time.Millisecond

// lowWater is the claimer's low-water mark: the last row it claimed, where
// its next claim starts (see store.Position). Only the claim loop uses it.
//
// A row can become due behind the mark: its enqueue (or another replica's
// completion) committed after later rows were claimed. A claim at the mark
// that comes back short (fewer rows than asked) is therefore followed by a
// full pass, and a full pass that comes back full with every row behind the
// old mark by another: rows behind the mark drain at the claim rate, not one
// batch per fullPassEvery. A full pass that reaches past the mark has
// claimed everything claimable behind it, and claims return to the mark.
type lowWater struct {
	pos      *store.Position
	lastFull time.Time
	wasFull  bool // the last claim started from the first due row
	fullNext bool // the next claim starts from the first due row
}

// start returns where claim should start: at the mark, or from the start
// when a full pass is due (see lowWater), every fullPassEvery, and whenever
// rows may be claimable behind the mark for reasons other than their due
// time (tools claimed one at a time per scope, or left out while their
// deferral runs).
func (w *lowWater) start(claim store.Claim) *store.Position {
	if w.pos == nil || w.fullNext || len(claim.Ordered) > 0 || len(claim.Excluded) > 0 || time.Since(w.lastFull) >= fullPassEvery {
		w.lastFull, w.wasFull, w.fullNext = time.Now(), true, false
		return nil
	}
	w.wasFull = false
	return w.pos
}

// advance moves the mark past the rows just claimed (asked is how many the
// claim asked for) and decides whether the next claim is a full pass.
func (w *lowWater) advance(rows []claimedRow, asked int) {
	old := w.pos
	var last *store.Position // the batch's last row in claim order
	for i := range rows {
		p := store.Position{Due: rows[i].Due, Seq: rows[i].Seq}
		if last == nil || p.Later(*last) {
			last = &p
		}
	}
	if last != nil && (w.pos == nil || last.Later(*w.pos)) {
		w.pos = last
	}
	short := len(rows) < asked
	switch {
	case w.wasFull:
		// More may lie behind the mark only if this pass was full and did
		// not get past it.
		w.fullNext = !short && old != nil && last != nil && old.Later(*last)
	case short:
		w.fullNext = time.Since(w.lastFull) >= fullPassMinGap
	}
}

// preflight decides, before any worker is involved, what happens to a
// claimed row that cannot be dispatched now: no route, no adapter, out of
// attempts or past its key's window, shutting down, or paused. It returns
// the row's route and adapter, or the completion that settles it. A refused
// tool's other due rows are deferred in bulk (deferrer), so the next claims
// do not pick them up one by one.
func (e *Engine) preflight(row *claimedRow, rt *Routing) (*Route, *dispatch.Entry, *completion) {
	route, ok := rt.Routes[row.ToolName]
	if !ok {
		e.unrouted.note(e.log, row.ToolName)
		e.deferrer.refuse(row.ToolName, outbox.OutcomeUnrouted, rt.UnroutedRecheck)
		msg := fmt.Sprintf("no route for tool_name %q in the loaded config; looked at again every %s", row.ToolName, rt.UnroutedRecheck)
		c := release(row, rt.UnroutedRecheck, false, &msg, outbox.OutcomeUnrouted)
		return nil, nil, &c
	}
	entry, ok := rt.Registry.Get(route.Adapter)
	if !ok {
		msg := fmt.Sprintf("route %q names adapter %q, which is not loaded", route.Tool, route.Adapter)
		c := release(row, rt.UnroutedRecheck, false, &msg, outbox.OutcomeUnrouted)
		return nil, nil, &c
	}
	if row.Attempts > route.MaxAttempts {
		c := failNow(row, fmt.Sprintf("attempts exhausted (%d of %d): the last attempt's lease expired", row.Attempts-1, route.MaxAttempts))
		return nil, nil, &c
	}
	if ttl := cmp.Or(route.KeyTTL, entry.KeyTTL); route.Class == outbox.ClassKeyIdempotent && ttl > 0 && row.Attempts > 1 &&
		row.DBNow.Sub(row.FirstAttemptAt) > ttl-time.Minute {
		c := failNow(row, fmt.Sprintf("key TTL guard: first attempt was %s ago, beyond the provider's idempotency window (key_ttl %s minus 1m); sending again could duplicate the effect",
			row.DBNow.Sub(row.FirstAttemptAt).Round(time.Second), ttl))
		return nil, nil, &c
	}
	if e.fetchCtx.Err() != nil {
		// Shutting down and this row was not sent yet: give it back untouched.
		c := release(row, 0, true, nil, "")
		return nil, nil, &c
	}
	if paused(e.pauses.Load(), route, entry.Name) {
		// Resuming wakes them; until then they are looked at once a minute.
		e.deferrer.refuse(route.Tool, outbox.RefusedPaused, pausedRecheck)
		msg := fmt.Sprintf("paused by an operator (route %q or adapter %q); waiting without consuming attempts", route.Tool, entry.Name)
		c := release(row, e.jitter(pausedRecheck), false, &msg, "")
		return nil, nil, &c
	}
	return route, entry, nil
}
