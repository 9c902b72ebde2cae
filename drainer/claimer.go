package drainer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/internal/suggest"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
)

// claimLoop leases due rows whenever worker slots are free: on a
// notification, when a slot frees, and at least every PollInterval. Each
// claim counts its rows under the cause of the wake-up that led to it
// (claimCause).
func (e *Engine) claimLoop() {
	defer e.loops.Done()
	defer close(e.claimDone)
	poll := time.NewTicker(e.cfg.PollInterval)
	defer poll.Stop()
	errDelay := 100 * time.Millisecond
	cause := causeStart
	for {
		soon, idle, err := e.claimThenArm(cause)
		if err != nil {
			if isShutdown(e.fetchCtx, err) {
				return
			}
			if e.claimFailed(err) {
				e.log.Warn("claim failed; retrying", "err", err, "retry_in", errDelay)
			}
			if !sleep(e.fetchCtx, errDelay) {
				return
			}
			errDelay = min(errDelay*2, 5*time.Second)
			continue
		}
		errDelay = 100 * time.Millisecond
	wait:
		select {
		case <-e.fetchCtx.Done():
			return
		case <-poll.C:
			cause = causePoll
			if e.slotsWanted.Load() {
				// Waiting for slots, not asleep: a finishing worker would
				// have brought the loop back for these rows.
				cause = causeSlots
			}
		case <-soon:
			cause = causeRetry
		case <-e.wake:
			if idle && e.wakeWhy.Load() == 0 {
				// Only a worker that finished while the last claim ran:
				// that claim found fewer due rows than free slots, and
				// the rows committed since are notified (the gate is
				// wanted) or found by the claim that follows arming it.
				// Claiming again would find nothing (four in five such
				// claims did).
				e.staleSlotWakes.Add(1)
				goto wait
			}
			cause = causeSlots
			// Under load slots free one by one; let them accumulate for a
			// moment so a claim (one durable commit) leases a full batch
			// rather than a row or two. Not when a producer's notification
			// woke the loop: the wake gate is armed only while the daemon
			// is not busy (see claimWhileFree), and then a new row goes out
			// at once rather than a cooldown later.
			notified := e.wakeWhy.Load()&(1<<causeNotify) != 0
			if free := e.cfg.Workers - int(e.active.Load()); free < e.cfg.BatchSize && !notified {
				t := time.NewTimer(e.cfg.FetchCooldown)
				select {
				case <-e.batchFree:
				case <-t.C:
				case <-e.fetchCtx.Done():
				}
				t.Stop()
			}
		}
		cause = e.takeWakeCause(cause)
	}
}

// claimThenArm claims while slots are free and rows are due; when no row
// was due it asks the wake gate for a slot before the loop sleeps, so that
// producers notify (see wakeGate). It never waits for the gate: once the
// gate holds its slot it wakes the loop to claim from the first due row,
// which finds the rows of producers that skipped their notification while
// no slot was held. The channel it returns, when not nil, asks for another
// look soon: a full pass is owed (see lowWater) but the last one was too
// recent. idle says the last claim found fewer due rows than it asked for.
func (e *Engine) claimThenArm(cause claimCause) (<-chan time.Time, bool, error) {
	idle, err := e.claimWhileFree(cause)
	if err != nil || !idle || e.fetchCtx.Err() != nil {
		return nil, idle, err
	}
	if !e.mark.wasFull && time.Since(e.mark.lastFull) >= fullPassMinGap {
		// A row whose transaction committed after later rows were claimed,
		// without a notification that says where, lies behind the mark,
		// where only a pass from the first due row finds it.
		e.mark.fullNext = true
		if idle, err = e.claimWhileFree(cause); err != nil || !idle || e.fetchCtx.Err() != nil {
			return nil, idle, err
		}
	}
	e.gate.want(true)
	if !e.mark.wasFull {
		// The gate stays armed (producers notify, with their rows'
		// position) while the owed full pass waits for its gap.
		return time.After(fullPassMinGap - time.Since(e.mark.lastFull)), true, nil
	}
	return nil, true, nil
}

// claimWhileFree claims until no slot is free or no row is due, and
// reports the latter (idle). It never leases more rows than free slots: a
// row waiting in memory would let its lease lapse and another replica send
// it again. A claim that brings a full batch, or at least disarmRows rows,
// gives the wake gate's slot back: the daemon is busy and claims again
// without being told. Below that it keeps the slot (producers keep
// notifying): at low rates taking it again before every sleep would cost
// more than the notifications. Whichever claim finds nothing due asks for
// the slot again (claimThenArm).
func (e *Engine) claimWhileFree(cause claimCause) (idle bool, err error) {
	defer func() { e.slotsWanted.Store(!idle) }()
	for e.fetchCtx.Err() == nil {
		// Set before free is read: a worker that finishes from here on
		// signals, so no freed slot goes unnoticed.
		e.slotsWanted.Store(true)
		// The slots are taken before the claim (Lease takes them too).
		n := e.reserveSlots(e.cfg.BatchSize)
		if n == 0 {
			return false, nil // a finishing worker signals
		}
		// The payloads in flight are bounded too: with nothing left of
		// MaxInFlightBytes, a finishing worker brings us back (one always
		// holds bytes then).
		left := e.cfg.MaxInFlightBytes - e.inFlightBytes.Load()
		if left <= 0 {
			e.releaseSlots(n)
			return false, nil
		}
		claimedAt := time.Now()
		rt := e.useRouting()
		// The claim itself is not cancelled when Stop begins: a statement cut
		// off after committing would strand its rows until their lease
		// expires. It is when Stop's time for writes is over (writes), as a
		// completion is, so a database that does not answer does not hold
		// Stop past its bound.
		ctx, cancel := context.WithTimeout(e.writes, claimTimeout)
		claim := store.Claim{Limit: n, Lease: e.cfg.Lease, Replica: e.cfg.ReplicaID,
			Ordered: rt.orderedTools, Routed: rt.routedTools, Excluded: e.deferrer.excludedTools(), Only: e.deferrer.onlyTools(), Durable: rt.durableClaims,
			MaxBytes: left}
		note := e.floor.take()
		claim.After = e.mark.start(claim, note)
		// Not before the mark's start: the routes of a full adapter are
		// left out without a full pass; the pass comes when it eases.
		claim.Excluded = e.capFullTools(rt, claim.Excluded)
		if h := e.hooks.claiming; h != nil {
			h(cause)
		}
		got, err := e.st.ClaimBatch(ctx, e.pool, claim)
		cancel()
		if err != nil {
			e.floor.putBack(note)
			rt.done()
			e.releaseSlots(n)
			return false, claimError{sent: claimedAt, err: err}
		}
		// Only a statement answered says the database is back: a pass
		// with no free slot or bytes ran none.
		e.db.ok(claimedAt)
		rows := got.Rows
		if got.Withheld > 0 {
			e.metrics.ClaimWithheld.Add(float64(got.Withheld))
		}
		if len(rows) == n || len(rows) >= disarmRows || got.Withheld > 0 {
			e.gate.want(false)
		}
		// Rows withheld for their bytes lie past the batch's last row: the
		// mark stays before them, and the claim counts as full.
		asked := n
		if got.Withheld > 0 {
			asked = len(rows)
		}
		e.mark.advance(rows, asked)
		e.releaseSlots(n - e.startRows(rows, rt, cause, claimedAt))
		rt.done()
		e.metrics.WorkersBusy.Set(float64(e.active.Load()))
		if got.Withheld > 0 {
			return false, nil // due rows wait for bytes: a finishing worker brings us back
		}
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

// startRows counts the rows a claim (or Lease) leased under cause, and
// starts a worker for each row its preflight lets through, in a slot the
// caller reserved; a row the preflight settles (unrouted, paused,
// cancelled) is finished at once. It returns how many workers it started:
// the caller gives back the slots it reserved beyond them. Each worker
// holds its own share of rt; the caller's stays the caller's to end.
func (e *Engine) startRows(rows []store.ClaimedRow, rt *Routing, cause claimCause, claimedAt time.Time) (started int) {
	if cause == causePoll && !e.cfg.PollOnly {
		e.witness.hold(rows, claimedAt, time.Now(), &e.claims) // counted once their notification had time to come
	} else {
		e.claims.add(cause, len(rows))
	}
	e.metrics.ClaimBatchSize.Observe(float64(len(rows)))
	for i := range rows {
		row := &rows[i]
		route, entry, c := e.preflight(row, rt)
		if c != nil {
			row.Payload = nil // never sent: its completion keeps no payload
			e.finish(c)
			continue
		}
		e.holds.claimed(row, route)
		e.workers.Add(1)
		rt.share()
		started++
		e.metrics.InFlightBytes.Set(float64(e.inFlightBytes.Add(int64(len(row.Payload)))))
		go e.work(row, rt, route, entry, claimedAt)
	}
	return started
}

// keyWindowLeft is how long a key_idempotent row of route may still be
// sent (the key TTL guard: never once key_ttl − 1m has passed since its
// first attempt, by the database's clock at its claim), elapsed after its
// claim; guarded is false when no window applies.
func keyWindowLeft(row *claimedRow, route *Route, entry *dispatch.Entry, elapsed time.Duration) (left time.Duration, guarded bool) {
	ttl := entry.KeyTTLFor(route.KeyTTL)
	if route.Class != outbox.ClassKeyIdempotent || ttl <= 0 {
		return 0, false
	}
	return ttl - time.Minute - row.DBNow.Sub(row.FirstAttemptAt) - elapsed, true
}

// keyWindowPassed returns the completion that fails a row whose key
// window (keyWindowLeft) has passed, elapsed after its claim, unsent.
func keyWindowPassed(row *claimedRow, route *Route, entry *dispatch.Entry, elapsed time.Duration) (completion, bool) {
	left, guarded := keyWindowLeft(row, route, entry, elapsed)
	if !guarded || left >= 0 {
		return completion{}, false
	}
	ttl := entry.KeyTTLFor(route.KeyTTL)
	msg := fmt.Sprintf("key TTL guard: first attempt was %s ago, beyond the provider's idempotency window (key_ttl %s minus 1m); sending again could duplicate the effect",
		(row.DBNow.Sub(row.FirstAttemptAt) + elapsed).Round(time.Second), ttl)
	if ttl <= time.Minute {
		msg = fmt.Sprintf("key TTL guard: the provider's idempotency window (key_ttl %s, adapter %s) is not longer than the guard's 1m margin, so no key_idempotent row of it can be sent safely; lengthen the window (a nats stream's duplicate window) or set a longer key_ttl, then requeue",
			ttl, entry.Name)
	}
	c := failNow(row, msg, noteKeyTTL)
	c.route, c.adapter = route, entry.Name
	return c, true
}

// claimTimeout bounds one claim's statements (a batch, or a gateway call's
// row taken by Lease).
const claimTimeout = 30 * time.Second

// disarmRows is how many rows a claim brings when the daemon counts as
// busy and gives its wake-gate slot back (a full batch always does).
const disarmRows = 32

// preflight decides, before any worker is involved, what happens to a
// claimed row that cannot be dispatched now: no route, no adapter, out of
// attempts or past its key's window, shutting down, or paused. It returns
// the row's route and adapter, or the completion that settles it. A refused
// tool's other due rows are deferred in bulk (deferrer), so the next claims
// do not pick them up one by one.
func (e *Engine) preflight(row *claimedRow, rt *Routing) (*Route, *dispatch.Entry, *completion) {
	if row.RunAborted {
		// Enqueued into a run whose abort its producer's snapshot could not
		// see: cancelled as the abort would have cancelled it, never sent.
		msg := "run aborted before this intent's first attempt: cancelled without sending"
		c := newCompletion(row, outbox.StatusCancelled)
		c.GiveBack, c.KeepNext, c.LastError, c.outcome = true, true, &msg, ""
		c.NoRequest, c.Note = true, noteRunAborted
		return nil, nil, &c
	}
	route, ok := rt.Routes[row.ToolName]
	if !ok {
		routed := rt.RoutedTools()
		e.unrouted.note(e.log, row.ToolName, routed)
		e.deferrer.refuseUnrouted(routed, rt.UnroutedRecheck)
		msg := fmt.Sprintf("no route for tool_name %q in the loaded config; looked at again every %s", row.ToolName, rt.UnroutedRecheck)
		if s := suggest.Closest(row.ToolName, routed); s != "" {
			msg = fmt.Sprintf("no route for tool_name %q in the loaded config (did you mean %q?); looked at again every %s", row.ToolName, s, rt.UnroutedRecheck)
		}
		c := release(row, rt.UnroutedRecheck, false, &msg, outbox.OutcomeUnrouted, noteUnrouted)
		c.waitsFor = outbox.RefusedUnrouted
		return nil, nil, &c
	}
	if !row.Counted {
		// Claimed as a tool without a route, and routed now (a reload came
		// between): its attempt was not counted, so it is not sent under
		// this claim. It is due again at once, claimed and counted.
		msg := fmt.Sprintf("route for tool_name %q loaded after the claim; claimed again", row.ToolName)
		c := release(row, 0, true, &msg, "", noteRouteLoaded)
		return nil, nil, &c
	}
	entry, ok := rt.Registry.Get(route.Adapter)
	if !ok {
		msg := fmt.Sprintf("route %q names adapter %q, which is not loaded", route.Tool, route.Adapter)
		c := release(row, rt.UnroutedRecheck, false, &msg, outbox.OutcomeUnrouted, noteNoAdapter)
		c.waitsFor = outbox.RefusedUnrouted
		return nil, nil, &c
	}
	if row.Attempts > route.MaxAttempts {
		c := failNow(row, fmt.Sprintf("attempts exhausted (%d of %d): the last attempt's lease expired", row.Attempts-1, route.MaxAttempts), noteExhausted)
		c.route = route
		return nil, nil, &c
	}
	if c, past := keyWindowPassed(row, route, entry, 0); past {
		return nil, nil, &c
	}
	if e.fetchCtx.Err() != nil {
		// Shutting down and this row was not sent yet: give it back untouched.
		c := releaseUnsent(row)
		return nil, nil, &c
	}
	if paused(e.pauses.Load(), route, entry.Name) {
		// Resuming wakes them; until then they are looked at once a minute.
		e.deferrer.refuse(route.Tool, outbox.RefusedPaused, pausedRecheck)
		msg := fmt.Sprintf("paused by an operator (route %q or adapter %q); waiting without consuming attempts", route.Tool, entry.Name)
		c := release(row, e.jitter(pausedRecheck), false, &msg, "", notePaused)
		c.waitsFor = outbox.RefusedPaused
		return nil, nil, &c
	}
	return route, entry, nil
}

// claimError is a claim's failure with the time its statement was sent:
// an earlier claim of the same pass may have ended an outage, and a
// failure dated from before that end would be taken for the old outage's
// and open no new one (dbHealth.failed).
type claimError struct {
	sent time.Time
	err  error
}

func (c claimError) Error() string { return c.err.Error() }
func (c claimError) Unwrap() error { return c.err }

// claimFailed reports a failed claim to the database's health (dated from
// its statement's send) and says whether the claim loop should log it
// itself.
func (e *Engine) claimFailed(err error) bool {
	sent := time.Now()
	var c claimError
	if errors.As(err, &c) {
		sent = c.sent
	}
	return e.db.failed("claim", sent, err)
}
