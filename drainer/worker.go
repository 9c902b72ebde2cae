package drainer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"sync"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/internal/suggest"
	"github.com/drainer-io/drainer/outbox"
)

// finish records a row's completion: counted, logged, queued for writing.
func (e *Engine) finish(c *completion) {
	if c.Status == outbox.StatusSucceeded && c.route != nil && c.route.Detect != nil && c.row.Kind == outbox.KindForward {
		c.route.Detect.sawSuccess(c.row.Key, idemkey.Tuple{AgentRunID: c.row.AgentRunID, StepID: c.row.StepID,
			ToolName: c.row.ToolName, BusinessScope: c.row.BusinessScope})
	}
	if c.route != nil && c.route.Announce && (c.Status.Terminal() || c.Status.Parked()) {
		c.Announce = true
	} else {
		c.Record = nil
	}
	c.sanitize()
	e.observe(c)
	e.completer.add(*c)
}

// work takes one leased row through dispatch to its completion.
func (e *Engine) work(row *claimedRow, rt *Routing, route *Route, entry *dispatch.Entry, claimedAt time.Time) {
	held := int64(len(row.Payload)) // counted in inFlightBytes by startRows
	defer func() {
		rt.done()
		e.metrics.InFlightBytes.Set(float64(e.inFlightBytes.Add(-held)))
		busy := e.active.Add(-1)
		e.metrics.WorkersBusy.Set(float64(busy))
		e.workers.Done()
		if e.slotsWanted.Load() {
			e.signal() // the claim loop waits for slots
		}
		if e.cfg.Workers-int(busy) >= e.cfg.BatchSize {
			select {
			case e.batchFree <- struct{}{}:
			default:
			}
		}
	}()
	c := e.process(row, rt, route, entry, claimedAt)
	// Sent: the completion keeps no payload, however long it waits for
	// the database (Engine.Unwritten), so what a replica holds stays
	// within MaxInFlightBytes.
	row.Payload = nil
	e.finish(&c)
}

// process takes a leased row that passed preflight through its adapter's
// gate, one attempt, the classification of the answer, and the decision
// of its next state.
func (e *Engine) process(row *claimedRow, rt *Routing, route *Route, entry *dispatch.Entry, claimedAt time.Time) completion {
	// A slot of the adapter's max_concurrency or a rate token free within
	// Config.GateWait is waited for, as long as the attempt still has its
	// whole timeout within the lease afterwards.
	budget := time.Until(claimedAt.Add(e.cfg.Lease - e.cfg.LeaseMargin - entry.Timeout - timeoutGrace))
	if left, guarded := keyWindowLeft(row, route, entry, time.Since(claimedAt)); guarded {
		budget = min(budget, left) // and within the key's window (the key TTL guard)
	}
	maxWait := max(0, min(e.cfg.GateWait, budget))
	own := entry
	entry, g, done, wait, ref := e.admit(rt, route, entry, maxWait, false)
	if ref != nil && ref.reason == outbox.RefusedSaturated && entry == own {
		start := time.Now()
		if g.waitSlot(e.fetchCtx, maxWait) {
			entry, g, done, wait, ref = e.admit(rt, route, own, max(0, maxWait-time.Since(start)), true)
		} else if e.fetchCtx.Err() != nil {
			return releaseUnsent(row) // shutting down before it was sent
		}
	}
	if ref != nil {
		if ref.reason == outbox.RefusedSaturated {
			g.turnedAway() // its routes are left out of the claims until a slot comes free
		}
		return e.refused(row, route, entry, ref)
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-e.fetchCtx.Done():
			t.Stop()
			done(dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Reason: dispatch.ReasonCancelled})
			return releaseUnsent(row) // shutting down before it was sent
		}
	}
	if c, past := keyWindowPassed(row, route, entry, time.Since(claimedAt)); past {
		// The key's window passed while the row waited for its gate (or its
		// worker was slow to start): the guard holds at the send, not only
		// at the claim.
		done(dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Reason: dispatch.ReasonCancelled})
		return c
	}
	ctx, cancel := context.WithDeadline(e.workCtx, attemptDeadline(claimedAt, e.cfg.Lease-e.cfg.LeaseMargin, entry.Timeout))
	defer cancel()
	msg, res := e.attempt(ctx, row, entry)
	done(res)
	if e.workCtx.Err() != nil && !res.Succeeded() && res.Outcome != dispatch.Terminal && res.Outcome != dispatch.Auth && res.NotSent {
		return releaseUnsent(row) // shutting down before it was sent
	}
	route, res = e.classify(claimedAt, route, msg, res)
	env := decideEnv{now: row.DBNow}
	if res.Outcome == dispatch.Auth {
		// Credentials refused: the route (or, refused on several routes,
		// the adapter) is held back, longer each time, and the row waits
		// at least as long (it consumed no attempt, so its own backoff
		// would not grow); the route's other due rows are deferred.
		env.authHold = g.holdLeft(route.Tool)
		e.deferrer.refuse(route.Tool, outbox.RefusedAuthHold, env.authHold)
	}
	e.rngMu.Lock()
	env.rand = e.rng
	c := decide(env, row, route, entry.Name, res)
	e.rngMu.Unlock()
	c.route = route
	return c
}

// refused hands back a row its adapter's gate turned away (no attempt
// consumed); a refusal that lasts defers the tool's other due rows.
func (e *Engine) refused(row *claimedRow, route *Route, entry *dispatch.Entry, ref *refusal) completion {
	msg := fmt.Sprintf("adapter %q %s; no attempt consumed", entry.Name, refusalText[ref.reason])
	var outcome outbox.Outcome
	switch ref.reason {
	case outbox.RefusedBreakerOpen:
		outcome = outbox.OutcomeBreakerOpen
		e.deferrer.refuse(route.Tool, outbox.RefusedBreakerOpen, ref.delay)
	case outbox.RefusedAuthHold:
		e.deferrer.refuse(route.Tool, outbox.RefusedAuthHold, ref.delay)
	}
	c := release(row, ref.delay, false, &msg, outcome, fmt.Sprintf(noteRefusedFmt, refusalNote[ref.reason]))
	c.adapter = entry.Name
	c.wakeWhenDue = true // due when the gate may let it through: a slot, a token, a probe, a recheck
	return c
}

// attempt makes one delivery attempt of row: the message, a span
// continuing the agent's trace, the call, its duration.
func (e *Engine) attempt(ctx context.Context, row *claimedRow, entry *dispatch.Entry) (*dispatch.Message, dispatch.Result) {
	msg := &dispatch.Message{
		Key:     row.Key,
		Tuple:   idemkey.Tuple{AgentRunID: row.AgentRunID, StepID: row.StepID, ToolName: row.ToolName, BusinessScope: row.BusinessScope},
		Kind:    row.Kind,
		Payload: row.Payload,
		Attempt: row.Attempts,
		Seq:     row.Seq,
	}
	if row.Traceparent != nil {
		msg.Traceparent = *row.Traceparent
	}
	ctx, span := e.startDispatchSpan(ctx, row, msg, entry.Name)
	start := time.Now()
	res := e.safeDispatch(ctx, entry, msg)
	e.metrics.DispatchDuration.WithLabelValues(entry.Name).Observe(time.Since(start).Seconds())
	endDispatchSpan(span, res)
	return msg, res
}

// classify settles what an attempt's answer means beyond the adapter's
// classification: a call cut off by shutdown after it may have been sent is
// ambiguous, and on a non_idempotent route with a detect probe an ambiguous
// attempt is probed (the probe may turn the route's class for this
// decision into key_idempotent: the effect is proven absent).
func (e *Engine) classify(claimedAt time.Time, route *Route, msg *dispatch.Message, res dispatch.Result) (*Route, dispatch.Result) {
	if e.workCtx.Err() != nil && !res.Succeeded() && res.Outcome != dispatch.Terminal && res.Outcome != dispatch.Auth {
		res.Outcome = dispatch.Ambiguous
		res.Err = fmt.Errorf("%w: %v", errCutOff, res.Err)
	}
	if route.NonIdempotent() && route.Detect != nil && mayHaveHappened(res) && e.workCtx.Err() == nil {
		// Within the lease, not within the attempt's deadline: an attempt
		// that timed out has used that up.
		ctx, cancel := context.WithDeadline(e.workCtx, claimedAt.Add(e.cfg.Lease-e.cfg.LeaseMargin))
		defer cancel()
		return e.detect(ctx, route, msg, res)
	}
	return route, res
}

// timeoutGrace lets an adapter's own timeout (the config's `timeout`) fire
// first, so it classifies the attempt itself; the engine's deadline only
// bounds an adapter that ignores it.
const timeoutGrace = time.Second

// attemptDeadline is when an attempt must end: within the lease, less its
// margin, and within the adapter's timeout (plus grace), whichever is first.
func attemptDeadline(claimedAt time.Time, leaseLeft, timeout time.Duration) time.Time {
	dl := claimedAt.Add(leaseLeft)
	if timeout > 0 {
		if t := time.Now().Add(timeout + timeoutGrace); t.Before(dl) {
			dl = t
		}
	}
	return dl
}

// mayHaveHappened reports whether a failed attempt may still have had its effect.
func mayHaveHappened(res dispatch.Result) bool {
	return (res.Outcome == dispatch.Retry || res.Outcome == dispatch.Ambiguous || res.Outcome == dispatch.OutcomeUnknownZero) && !res.NotSent && !res.Refused
}

// detect asks the route's probe about an ambiguous attempt of a
// non_idempotent route, within what is left of the lease. The effect exists:
// success. It does not: a retry with the same key, the attempt counted. No
// answer: the row stays outcome_unknown.
func (e *Engine) detect(ctx context.Context, route *Route, m *dispatch.Message, res dispatch.Result) (*Route, dispatch.Result) {
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) < 500*time.Millisecond {
		res.Err = fmt.Errorf("%v (no lease time left to run the detect probe)", res.Err)
		return route, res
	}
	verdict, probe := route.Detect.Probe(ctx, m)
	switch verdict {
	case probeHappened:
		return route, probe
	case probeAbsent:
		// Safe to send again: decide as for a route whose provider honours keys.
		retry := *route
		retry.Class = outbox.ClassKeyIdempotent
		res.Err = fmt.Errorf("%v; detect probe: no effect (http %d), retrying", res.Err, probe.Status)
		return &retry, res
	}
	res.Err = fmt.Errorf("%v; %v", res.Err, probe.Err)
	return route, res
}

var refusalText = map[outbox.Refusal]string{
	outbox.RefusedBreakerOpen: "circuit breaker is open (the provider looks down)",
	outbox.RefusedSaturated:   "is at max_concurrency",
	outbox.RefusedRateLimited: "is at its rate_limit",
	outbox.RefusedAuthHold:    "is held back for this route: the provider refused the credentials (auth hold)",
}

// admit passes a row through its adapter's gate. While the primary's breaker
// is open, a route marked critical: false with a fallback goes to the
// fallback adapter instead (same key). slotHeld says the caller took a
// slot of entry's gate (gate.waitSlot): given back if the row goes to the
// fallback, or is turned away.
func (e *Engine) admit(rt *Routing, route *Route, entry *dispatch.Entry, maxWait time.Duration, slotHeld bool) (*dispatch.Entry, *gate, func(dispatch.Result), time.Duration, *refusal) {
	e.rngMu.Lock()
	defer e.rngMu.Unlock()
	g := rt.gates[entry.Name]
	done, wait, ref := g.admitWithin(e.rng, route.Tool, maxWait, slotHeld)
	if ref == nil || ref.reason != outbox.RefusedBreakerOpen || route.Critical || route.Fallback == "" {
		return entry, g, done, wait, ref
	}
	fb, ok := rt.Registry.Get(route.Fallback)
	if !ok {
		return entry, g, nil, 0, ref
	}
	fg := rt.gates[fb.Name]
	fdone, fwait, fref := fg.admitWithin(e.rng, route.Tool, maxWait, false)
	if fref != nil {
		// The fallback is busy for now: come back when it may have room,
		// not when the primary's breaker closes.
		return fb, fg, nil, 0, fref
	}
	return fb, fg, fdone, fwait, nil
}

// gateWaitMax is the longest a row waits in its worker for a slot of its
// adapter's max_concurrency or for its rate token by default
// (Config.GateWait); a later one turns it away (back to pending until
// then).
// A route limited to 20/s with a burst of 1 drained 200 rows in 18.6 s
// waiting up to 1 s, and in 12.7 s, with half the hand-backs, up to 3 s.
// The rows waiting hold worker slots, within the adapter's share of them.
const gateWaitMax = 3 * time.Second

// jitter returns d jittered by ±50%.
func (e *Engine) jitter(d time.Duration) time.Duration {
	e.rngMu.Lock()
	defer e.rngMu.Unlock()
	return jitterAround(e.rng, d)
}

// safeDispatch calls the adapter, turning a panic into an ambiguous result.
func (e *Engine) safeDispatch(ctx context.Context, entry *dispatch.Entry, m *dispatch.Message) (res dispatch.Result) {
	defer func() {
		if p := recover(); p != nil {
			e.log.Error("adapter panicked", "adapter", entry.Name, "key", m.Key, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			res = dispatch.Result{Outcome: dispatch.Ambiguous, Reason: "panic", Err: errors.New("adapter panicked")}
		}
	}()
	return entry.Adapter.Dispatch(ctx, m)
}

// observe counts and logs one decision.
func (e *Engine) observe(c *completion) {
	if c.outcome == "" {
		return // released at shutdown: not a dispatch
	}
	e.metrics.DispatchTotal.WithLabelValues(c.adapter, string(c.outcome)).Inc()
	if c.row.Kind == outbox.KindCompensation {
		switch c.Status {
		case outbox.StatusSucceeded:
			e.metrics.CompensationsTotal.WithLabelValues(string(outbox.CompensationSucceeded)).Inc()
		case outbox.StatusCompensationFailed:
			e.metrics.CompensationsTotal.WithLabelValues(string(outbox.CompensationFailed)).Inc()
			e.metrics.CompensationFailedTotal.Inc()
		case outbox.StatusPending:
			e.metrics.CompensationsTotal.WithLabelValues(string(outbox.CompensationRetry)).Inc()
		}
	}
	attrs := []any{"key", c.row.Key, "outbox_seq", c.Seq, "tool", c.row.ToolName, "adapter", c.adapter,
		"attempt", c.row.Attempts, "outcome", c.outcome, "status", c.Status}
	switch {
	case c.outcome == outbox.OutcomeAuth:
		e.log.Error("provider refused the adapter's credentials; no attempt consumed", append(attrs, "err", deref(c.LastError))...)
	case c.Status == outbox.StatusFailed || c.Status == outbox.StatusCompensationFailed || c.Status == outbox.StatusOutcomeUnknown:
		e.log.Warn("row parked or failed", append(attrs, "err", deref(c.LastError))...)
	case c.Status == outbox.StatusPending && c.outcome != outbox.OutcomeUnrouted:
		e.log.Debug("attempt failed; rescheduled", append(attrs, "next_attempt_in", c.Delay, "err", deref(c.LastError))...)
	default:
		e.log.Debug("dispatched", attrs...)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// maxToolsRemembered bounds the maps an engine keeps per tool_name of the
// rows it claims (unroutedLog, deferrer.last): past it, entries that no
// longer matter are dropped.
const maxToolsRemembered = 1024

// unroutedLog logs each unrouted tool at most once a minute, and at most
// unroutedLines tools a minute: past that, one line a minute counts the
// tools it did not name (producers may invent thousands of names).
type unroutedLog struct {
	mu     sync.Mutex
	seen   map[string]time.Time
	window time.Time // start of the minute the lines are counted in
	lines  int       // tools named in it
	quiet  map[string]bool
}

// unroutedLines bounds the tools the unrouted log names a minute.
const unroutedLines = 10

func (u *unroutedLog) note(log interface{ Warn(string, ...any) }, tool string, routed []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.seen == nil {
		u.seen = make(map[string]time.Time)
	}
	if last, ok := u.seen[tool]; ok && time.Since(last) < time.Minute {
		return
	}
	if time.Since(u.window) >= time.Minute {
		if len(u.quiet) > 0 {
			log.Warn(fmt.Sprintf("rows of more tools wait for a route: the log names %d tools a minute; tools counts the others a claim found, "+
				"not those whose rows were deferred together unseen", unroutedLines),
				"tools", len(u.quiet), "at_least", len(u.quiet) >= maxToolsRemembered)
		}
		u.window, u.lines, u.quiet = time.Now(), 0, nil
	}
	if u.lines >= unroutedLines {
		if u.quiet == nil {
			u.quiet = map[string]bool{}
		}
		if len(u.quiet) < maxToolsRemembered {
			u.quiet[tool] = true
		}
		return
	}
	u.lines++
	if len(u.seen) >= maxToolsRemembered {
		// Producers name tools freely: forget the ones logged over a
		// minute ago rather than keep every name ever seen.
		maps.DeleteFunc(u.seen, func(_ string, at time.Time) bool { return time.Since(at) >= time.Minute })
		if len(u.seen) >= maxToolsRemembered {
			clear(u.seen)
		}
	}
	u.seen[tool] = time.Now()
	const msg = "rows wait for a route: no route for their tool_name; they drain once a config with one is loaded"
	if s := suggest.Closest(tool, routed); s != "" {
		log.Warn(msg, "tool", tool, "did_you_mean", s)
		return
	}
	log.Warn(msg, "tool", tool)
}
