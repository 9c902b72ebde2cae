package drainer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/idemkey"
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
	errDelay := 100 * time.Millisecond
	for {
		if err := e.claimWhileFree(); err != nil {
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

// claimWhileFree claims until no slot is free or no row is due. It never
// leases more rows than free slots: a row waiting in memory would let its
// lease lapse and another replica send it again.
func (e *Engine) claimWhileFree() error {
	for e.fetchCtx.Err() == nil {
		free := e.cfg.Workers - int(e.active.Load())
		if free <= 0 {
			return nil // a finishing worker signals
		}
		n := min(free, e.cfg.BatchSize)
		claimedAt := time.Now()
		rt := e.useRouting()
		// The claim itself is not cancelled by Stop: a statement cut off after
		// committing would strand its rows until their lease expires.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(e.fetchCtx), 30*time.Second)
		rows, err := e.st.Claim(ctx, e.pool, store.Claim{Limit: n, Lease: e.cfg.Lease, Replica: e.cfg.ReplicaID,
			Ordered: rt.orderedTools, Excluded: e.deferrer.excludedTools(), Durable: rt.durableClaims})
		cancel()
		if err != nil {
			rt.done()
			return err
		}
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
		if len(rows) < n || e.cfg.Workers-int(e.active.Load()) < e.cfg.BatchSize {
			// Nothing more is due, or too few slots are free to be worth a
			// commit: a finishing worker (or the poll) brings us back.
			return nil
		}
	}
	return nil
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
		e.deferrer.refuse(row.ToolName, outcomeUnrouted, rt.UnroutedRecheck)
		msg := fmt.Sprintf("no route for tool_name %q in the loaded config; looked at again every %s", row.ToolName, rt.UnroutedRecheck)
		c := release(row, rt.UnroutedRecheck, false, &msg, outcomeUnrouted)
		return nil, nil, &c
	}
	entry, ok := rt.Registry.Get(route.Adapter)
	if !ok {
		msg := fmt.Sprintf("route %q names adapter %q, which is not loaded", route.Tool, route.Adapter)
		c := release(row, rt.UnroutedRecheck, false, &msg, outcomeUnrouted)
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
		e.deferrer.refuse(route.Tool, "paused", pausedRecheck)
		msg := fmt.Sprintf("paused by an operator (route %q or adapter %q); waiting without consuming attempts", route.Tool, entry.Name)
		c := release(row, e.jitter(pausedRecheck), false, &msg, "")
		return nil, nil, &c
	}
	return route, entry, nil
}

// finish records a row's completion: counted, logged, queued for writing.
func (e *Engine) finish(c *completion) {
	if c.Status == outbox.StatusSucceeded && c.route != nil && c.route.Detect != nil && c.row.Kind == outbox.KindForward {
		c.route.Detect.sawSuccess(c.row.Key, idemkey.Tuple{AgentRunID: c.row.AgentRunID, StepID: c.row.StepID,
			ToolName: c.row.ToolName, BusinessScope: c.row.BusinessScope})
	}
	c.sanitize()
	e.observe(c)
	e.completer.add(*c)
}

// work takes one leased row through dispatch to its completion.
func (e *Engine) work(row *claimedRow, rt *Routing, route *Route, entry *dispatch.Entry, claimedAt time.Time) {
	defer func() {
		rt.done()
		busy := e.active.Add(-1)
		e.metrics.WorkersBusy.Set(float64(busy))
		e.workers.Done()
		e.signal()
		if e.cfg.Workers-int(busy) >= e.cfg.BatchSize {
			select {
			case e.batchFree <- struct{}{}:
			default:
			}
		}
	}()
	c := e.process(row, rt, route, entry, claimedAt)
	e.finish(&c)
}

// process dispatches one leased row that passed preflight and decides its
// next state.
func (e *Engine) process(row *claimedRow, rt *Routing, route *Route, entry *dispatch.Entry, claimedAt time.Time) completion {
	entry, g, done, ref := e.admit(rt, route, entry)
	if ref != nil {
		msg := fmt.Sprintf("adapter %q %s; no attempt consumed", entry.Name, refusalText[ref.reason])
		outcome := ""
		switch ref.reason {
		case refusedBreakerOpen:
			outcome = outcomeBreakerOpen
			e.deferrer.refuse(route.Tool, outcomeBreakerOpen, ref.delay)
		case refusedAuthHold:
			e.deferrer.refuse(route.Tool, "auth", ref.delay)
		}
		c := release(row, ref.delay, false, &msg, outcome)
		c.adapter = entry.Name
		return c
	}

	ctx, cancel := context.WithDeadline(e.workCtx, attemptDeadline(claimedAt, e.cfg.Lease-e.cfg.LeaseMargin, entry.Timeout))
	defer cancel()
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
	ctx, span := e.startDispatchSpan(ctx, msg, entry.Name)
	start := time.Now()
	res := e.safeDispatch(ctx, entry, msg)
	e.metrics.DispatchDuration.WithLabelValues(entry.Name).Observe(time.Since(start).Seconds())
	done(res)
	endDispatchSpan(span, res)

	if e.workCtx.Err() != nil && !res.Succeeded() && res.Outcome != dispatch.Terminal && res.Outcome != dispatch.Auth {
		if res.NotSent {
			return release(row, 0, true, nil, "")
		}
		res.Outcome = dispatch.Ambiguous
		res.Err = fmt.Errorf("%w: %v", errCutOff, res.Err)
	}
	if route.NonIdempotent() && route.Detect != nil && mayHaveHappened(res) && e.workCtx.Err() == nil {
		route, res = e.detect(ctx, route, msg, res)
	}
	env := decideEnv{now: row.DBNow}
	if res.Outcome == dispatch.Auth {
		// Credentials refused: the adapter is held back, longer each time,
		// and the row waits at least as long (it consumed no attempt, so
		// its own backoff would not grow).
		env.authHold = g.authHoldLeft()
		e.deferrer.refuse(route.Tool, "auth", env.authHold)
	}
	e.rngMu.Lock()
	env.rand = e.rng
	c := decide(env, row, route, entry.Name, res)
	e.rngMu.Unlock()
	c.route = route
	return c
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
	return (res.Outcome == dispatch.Retry || res.Outcome == dispatch.Ambiguous || res.Outcome == dispatch.OutcomeUnknownZero) && !res.NotSent
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

var refusalText = map[string]string{
	refusedBreakerOpen: "circuit breaker is open (the provider looks down)",
	refusedSaturated:   "is at max_concurrency",
	refusedRateLimited: "is at its rate_limit",
	refusedAuthHold:    "is held back: the provider refused its credentials",
}

// admit passes a row through its adapter's gate. While the primary's breaker
// is open, a route marked critical: false with a fallback goes to the
// fallback adapter instead (same key).
func (e *Engine) admit(rt *Routing, route *Route, entry *dispatch.Entry) (*dispatch.Entry, *gate, func(dispatch.Result), *refusal) {
	e.rngMu.Lock()
	defer e.rngMu.Unlock()
	g := rt.gates[entry.Name]
	done, ref := g.admit(e.rng)
	if ref == nil || ref.reason != refusedBreakerOpen || route.Critical || route.Fallback == "" {
		return entry, g, done, ref
	}
	fb, ok := rt.Registry.Get(route.Fallback)
	if !ok {
		return entry, g, nil, ref
	}
	fg := rt.gates[fb.Name]
	fdone, fref := fg.admit(e.rng)
	if fref != nil {
		// The fallback is busy for now: come back when it may have room,
		// not when the primary's breaker closes.
		return fb, fg, nil, fref
	}
	return fb, fg, fdone, nil
}

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
	e.metrics.DispatchTotal.WithLabelValues(c.adapter, c.outcome).Inc()
	if c.row.Kind == outbox.KindCompensation {
		switch c.Status {
		case outbox.StatusSucceeded:
			e.metrics.CompensationsTotal.WithLabelValues("succeeded").Inc()
		case outbox.StatusCompensationFailed:
			e.metrics.CompensationsTotal.WithLabelValues("failed").Inc()
			e.metrics.CompensationFailedTotal.Inc()
		case outbox.StatusPending:
			e.metrics.CompensationsTotal.WithLabelValues("retry").Inc()
		}
	}
	attrs := []any{"key", c.row.Key, "outbox_seq", c.Seq, "tool", c.row.ToolName, "adapter", c.adapter,
		"attempt", c.row.Attempts, "outcome", c.outcome, "status", c.Status}
	switch {
	case c.outcome == "auth":
		e.log.Error("provider refused the adapter's credentials; no attempt consumed", append(attrs, "err", deref(c.LastError))...)
	case c.Status == outbox.StatusFailed || c.Status == outbox.StatusCompensationFailed || c.Status == outbox.StatusOutcomeUnknown:
		e.log.Warn("row parked or failed", append(attrs, "err", deref(c.LastError))...)
	case c.Status == outbox.StatusPending && c.outcome != outcomeUnrouted:
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

// unroutedLog logs each unrouted tool at most once a minute.
type unroutedLog struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

func (u *unroutedLog) note(log interface{ Warn(string, ...any) }, tool string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.seen == nil {
		u.seen = make(map[string]time.Time)
	}
	if last, ok := u.seen[tool]; ok && time.Since(last) < time.Minute {
		return
	}
	u.seen[tool] = time.Now()
	log.Warn("rows wait for a route: no route for their tool_name; they drain once a config with one is loaded", "tool", tool)
}
