package drainer

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"golang.org/x/time/rate"
)

// gate protects one adapter: a circuit breaker, a rate limit, a
// concurrency cap and the auth holds of its routes. Rows that a gate turns
// away go back to pending without consuming an attempt.
type gate struct {
	name    string
	log     *slog.Logger
	breaker *breaker // nil: disabled
	limiter *rate.Limiter
	slots   chan struct{} // nil: no cap
	// waitCap is how many rows may wait in their workers for a slot at
	// once (waitSlot); waiting counts them.
	waitCap, waiting atomic.Int32
	// free, when set, is told the tools whose rows the gate let go again:
	// its breaker closed, or an auth hold ended (the engine wakes the rows
	// it deferred meanwhile).
	free func(tools []string)
	// room, when set, is told that a slot, or a place among the rows
	// waiting for one, came free after a claim left the adapter's routes
	// out because it had neither (full; the engine wakes the claim loop).
	room func()
	// capMu orders full against eased: watched says a claim left the
	// routes out since the gate last eased, refused that the cap turned a
	// row away since (it could not wait: no place, or no time within its
	// lease); roomAt is when room was last told, roomSoon its timer when
	// it is told later (at most once per fullPassMinGap: each time is a
	// pass from the first due row).
	capMu    sync.Mutex
	watched  bool
	refused  bool
	roomAt   time.Time
	roomSoon *time.Timer

	authMu sync.Mutex
	routes map[string]bool  // the routes (tools) of the loaded config sending to this adapter
	held   map[string]*hold // route -> its auth hold
	whole  *hold            // the whole adapter, once several routes are refused alike
	lapse  time.Duration    // authHoldLapse (shorter in tests)
}

// GatePolicy is the protective policy of one adapter.
type GatePolicy struct {
	// BreakerFailures opens the breaker after this many consecutive
	// failures (529/503/502/504, auth, connection); 0 disables it.
	BreakerFailures int
	// BreakerOpenFor caps the wait between the probes of an open breaker
	// (the first goes after breakerFirstProbe).
	BreakerOpenFor time.Duration
	// RatePerSecond and Burst limit dispatches; 0 means unlimited.
	RatePerSecond float64
	Burst         int
	// MaxConcurrency caps calls under way; 0 means no cap.
	MaxConcurrency int
}

func newGate(name string, p GatePolicy, m *Metrics, log *slog.Logger) *gate {
	return newGateWithClock(name, p, m, log, time.Now)
}

// newGateWithClock is newGate with the clock its breaker reads.
func newGateWithClock(name string, p GatePolicy, m *Metrics, log *slog.Logger, now func() time.Time) *gate {
	g := &gate{name: name, log: log, routes: map[string]bool{}, held: map[string]*hold{}, lapse: authHoldLapse}
	if p.BreakerFailures > 0 {
		g.breaker = newBreaker(p.BreakerFailures, p.BreakerOpenFor, now, func(tr breakerTransition) {
			g.logBreaker(tr)
			if tr.to == breakerClosed && g.free != nil {
				g.free(g.routeList())
			}
			if m != nil {
				m.CircuitBreakerState.WithLabelValues(name).Set(float64(tr.to))
			}
		})
	}
	if p.RatePerSecond > 0 {
		g.limiter = rate.NewLimiter(rate.Limit(p.RatePerSecond), max(p.Burst, 1))
	}
	if p.MaxConcurrency > 0 {
		g.slots = make(chan struct{}, p.MaxConcurrency)
	}
	if m != nil {
		m.CircuitBreakerState.WithLabelValues(name).Set(0)
	}
	return g
}

// refusal says why a gate turned a row away and when to look at it again.
type refusal struct {
	reason outbox.Refusal
	delay  time.Duration
}

// admitWithin reserves a slot, a rate token and a breaker permit for a row
// of route (its tool), the token if it comes free within maxWait: the
// caller waits wait before its attempt. On success the caller must call the
// returned done with the attempt's result. A row turned away for a
// token later than that goes back to pending and comes due when it is
// free; one that waits in its worker instead keeps the route at its rate
// (turned away, the rows of a route limited to 20/s with a burst of 1 went
// out about once a poll). slotHeld says the caller took a slot of the cap
// already (waitSlot): admitWithin takes it over, to give it back on a
// refusal or with done.
func (g *gate) admitWithin(r *rand.Rand, route string, maxWait time.Duration, slotHeld bool) (done func(dispatch.Result), wait time.Duration, ref *refusal) {
	probing, left := g.holdAdmit(route)
	if left > 0 {
		if slotHeld {
			g.freeSlot()
		}
		return nil, 0, &refusal{reason: outbox.RefusedAuthHold, delay: left + jitterAround(r, left/4+10*time.Millisecond)}
	}
	refuse := func(ref *refusal) (func(dispatch.Result), time.Duration, *refusal) {
		g.unprobe(probing)
		return nil, 0, ref
	}
	if g.slots != nil && !slotHeld {
		select {
		case g.slots <- struct{}{}:
		default:
			return refuse(&refusal{reason: outbox.RefusedSaturated, delay: jitterAround(r, 500*time.Millisecond)})
		}
	}
	release := func() {
		if g.slots != nil {
			g.freeSlot()
		}
	}
	if g.limiter != nil {
		res := g.limiter.Reserve()
		wait = res.Delay()
		if wait > maxWait {
			res.Cancel()
			release()
			return refuse(&refusal{reason: outbox.RefusedRateLimited, delay: wait + jitterAround(r, 20*time.Millisecond)})
		}
	}
	var breakerDone func(verdict)
	if g.breaker != nil {
		var retryIn time.Duration
		var ok bool
		breakerDone, retryIn, ok = g.breaker.allow(route)
		if !ok {
			release()
			return refuse(&refusal{reason: outbox.RefusedBreakerOpen, delay: breakerRetryDelay(r, retryIn)})
		}
	}
	var once sync.Once
	return func(res dispatch.Result) {
		once.Do(func() {
			wholeHeld := g.noteAuth(route, res)
			if breakerDone != nil {
				breakerDone(breakerVerdict(res, wholeHeld))
			}
			release()
		})
	}, wait, nil
}

// waitSlot takes a slot of the adapter's max_concurrency for a row the cap
// turned away, waiting up to maxWait for one to come free, unless waitCap
// rows wait already; rows waiting are served in the order they came (a
// channel serves its blocked senders first come, first served). It
// reports whether it took a slot; the caller passes it on to admitWithin.
// Turned away, the rows of an adapter capped at two calls went out about
// two a poll: nothing woke the claimer when a slot came free.
func (g *gate) waitSlot(ctx context.Context, maxWait time.Duration) bool {
	if g.slots == nil || maxWait <= 0 {
		return false
	}
	if g.waiting.Add(1) > g.waitCap.Load() {
		g.waiting.Add(-1)
		return false
	}
	defer func() {
		g.waiting.Add(-1)
		g.eased() // a place to wait came free
	}()
	t := time.NewTimer(maxWait)
	defer t.Stop()
	select {
	case g.slots <- struct{}{}:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// full reports whether a row of this adapter claimed now would find
// neither a slot of its max_concurrency nor a place to wait for one
// (waitSlot): its cap would turn it away. Then the claim leaves the
// adapter's routes out (Engine.capFullTools), and the gate tells room
// when it eases. Claimed anyway, such rows were turned away, their
// workers freed, and the next claim took the next due rows of the same
// routes at once: a claim, a release and an audit entry each, about a
// hundred times a second, for one row sent per call's duration.
func (g *gate) full() bool {
	if g.slots == nil {
		return false
	}
	g.capMu.Lock()
	defer g.capMu.Unlock()
	full := len(g.slots) == cap(g.slots) && (g.refused || g.waiting.Load() >= g.waitCap.Load())
	// Only eased clears watched: a claim that takes the routes again
	// before eased is told may start at the low-water mark, past the rows
	// an earlier one left out.
	g.watched = g.watched || full
	return full
}

// turnedAway says the cap turned a row away: until a slot or a place to
// wait comes free, the rows claimed would be too.
func (g *gate) turnedAway() {
	g.capMu.Lock()
	g.refused = true
	g.capMu.Unlock()
}

// freeSlot gives a slot of the cap back.
func (g *gate) freeSlot() {
	<-g.slots
	g.eased()
}

// eased says a slot or a place to wait came free: a claim that left the
// routes out since (full) is followed by one that takes them, from the
// first due row, at most one per fullPassMinGap (a busy cap eases at
// each call's end).
func (g *gate) eased() {
	g.capMu.Lock()
	g.refused = false
	if !g.watched || g.room == nil || g.roomSoon != nil {
		g.capMu.Unlock()
		return // nothing left out, or told soon
	}
	g.watched = false
	if wait := fullPassMinGap - time.Since(g.roomAt); wait > 0 {
		g.roomSoon = time.AfterFunc(wait, func() {
			g.capMu.Lock()
			g.roomSoon, g.roomAt = nil, time.Now()
			g.capMu.Unlock()
			g.room()
		})
		g.capMu.Unlock()
		return
	}
	g.roomAt = time.Now()
	g.capMu.Unlock()
	g.room()
}

// capFullTools appends to tools the routes of rt whose adapter is full
// (gate.full): the claim leaves them out until it eases, when the gate
// wakes the claim loop for a pass from the first due row (the rows left
// out may lie behind the low-water mark by then).
func (e *Engine) capFullTools(rt *Routing, tools []string) []string {
	for _, g := range rt.gates {
		if g.full() {
			tools = append(tools, g.routeList()...)
		}
	}
	return tools
}

// logBreaker logs each opening of the breaker (from closed) and each
// closing once, saying what the adapter's rows do meanwhile; probes, and
// failed probes (the breaker stays open), are debug lines. Called under the
// breaker's lock, in the order of the transitions.
func (g *gate) logBreaker(tr breakerTransition) {
	switch {
	case tr.to == breakerOpen && tr.from == breakerClosed:
		g.log.Warn("circuit breaker opened: the provider looks down; its rows wait without consuming attempts (routes with a fallback use it) until a probe succeeds",
			"adapter", g.name, "route", tr.cause, "next_probe_in", tr.nextProbe, "open_for", g.breaker.openFor)
	case tr.to == breakerClosed:
		g.log.Info("circuit breaker closed: the provider answers again; its rows go out",
			"adapter", g.name, "route", tr.cause, "open_for", tr.at.Sub(tr.openedAt).Round(time.Millisecond),
			"failed_probes", tr.failedProbes)
	case tr.to == breakerHalfOpen:
		g.log.Debug("circuit breaker probe", "adapter", g.name, "failed_probes", tr.failedProbes)
	default:
		g.log.Debug("circuit breaker probe failed; breaker stays open", "adapter", g.name, "route", tr.cause,
			"failed_probes", tr.failedProbes, "next_probe_in", tr.nextProbe)
	}
}

// status is what the gate says of its adapter for readiness and metrics.
func (g *gate) status(now time.Time) AdapterState {
	st := AdapterState{Adapter: g.name, Ready: true}
	if g.breaker != nil {
		switch g.breaker.current() {
		case breakerOpen:
			st.Ready, st.Reason = false, "circuit breaker open"
		case breakerHalfOpen:
			st.Ready, st.Reason = false, "circuit breaker half-open"
		}
	}
	g.authMu.Lock()
	defer g.authMu.Unlock()
	g.lapseLocked(now)
	if g.whole != nil {
		st.Holds = append(st.Holds, Hold{Route: wholeAdapter, Since: g.whole.since})
		if st.Ready {
			st.Ready, st.Reason = false, "credentials refused on several routes (auth hold)"
		}
	}
	for r, h := range g.held {
		st.Holds = append(st.Holds, Hold{Route: r, Since: h.since})
	}
	slices.SortFunc(st.Holds, func(a, b Hold) int { return strings.Compare(a.Route, b.Route) })
	for r := range g.routes {
		st.Routes = append(st.Routes, r)
	}
	slices.Sort(st.Routes)
	return st
}

// breakerRetryDelay is when a row the breaker turned away is looked at
// again: when the next probe may go (retryIn, at least 100 ms: while a
// probe is under way, its answer decides), jittered so the rows do not all
// return at the same instant.
func breakerRetryDelay(r *rand.Rand, retryIn time.Duration) time.Duration {
	left := max(retryIn, 100*time.Millisecond)
	return left + jitterAround(r, left/4+10*time.Millisecond)
}

// breakerVerdict: provider-down signals are failures (an auth refusal only
// once it holds the whole adapter); answers that show the provider is up
// (success, replay, terminal 4xx) are successes; the rest is neutral.
func breakerVerdict(res dispatch.Result, wholeHeld bool) verdict {
	if res.Reason == dispatch.ReasonNotReady || res.Reason == dispatch.ReasonUnsendable || res.AwaitsFix {
		return verdictNeutral // the adapter did not ask its provider, or it lacks this row's destination alone
	}
	switch res.Outcome {
	case dispatch.Success, dispatch.Replay, dispatch.Terminal:
		return verdictSuccess
	case dispatch.Auth:
		if !wholeHeld {
			return verdictNeutral // one route's credentials, not the provider
		}
		return verdictFailure
	case dispatch.Retry, dispatch.Ambiguous:
		switch res.Status {
		case 502, 503, 504, 529:
			return verdictFailure
		case 0:
			if res.Reason == dispatch.ReasonCancelled || res.Refused && !res.Down {
				return verdictNeutral // not asked, or it answered: a refusal of this request alone
			}
			return verdictFailure // connection refused, reset, timeout; a provider that says it is down
		}
	}
	return verdictNeutral
}

// jitterAround returns a duration uniform in [d/2, 3d/2).
func jitterAround(r *rand.Rand, d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + time.Duration(r.Int64N(int64(d)))
}

// attachGates derives what the claim reads of rt and gives it a gate per adapter, keeping the running gate (and its
// breaker state) of an adapter whose policy did not change. An adapter
// without max_concurrency, when several adapters share the workers, may use
// at most three quarters of them, so one slow provider cannot starve the
// others; one with max_concurrency may hold that many (all of them when it
// is the only adapter) with its calls and the rows waiting for its slots.
func (e *Engine) attachGates(rt *Routing) {
	rt.durableClaims = len(rt.NonIdempotentTools()) > 0
	rt.orderedTools = rt.OrderedTools()
	rt.routedTools = append([]string{}, rt.RoutedTools()...) // never nil: nil would count every row
	e.gatesMu.Lock()
	defer e.gatesMu.Unlock()
	names := rt.Registry.Names()
	gates := make(map[string]*gate, len(names))
	routesOf := map[string]map[string]bool{}
	for tool, r := range rt.Routes {
		if routesOf[r.Adapter] == nil {
			routesOf[r.Adapter] = map[string]bool{}
		}
		routesOf[r.Adapter][tool] = true
	}
	share := e.cfg.Workers
	if len(names) > 1 && e.cfg.Workers > 1 {
		share = max(1, e.cfg.Workers*3/4)
	}
	for _, name := range names {
		p := rt.Policies[name]
		// Rows of an adapter at its max_concurrency wait in their workers
		// for a slot (waitSlot) while its calls and its rows waiting hold
		// no more workers than its share.
		waitCap := 0
		if p.MaxConcurrency > 0 {
			waitCap = max(0, share-p.MaxConcurrency)
		}
		if p.MaxConcurrency == 0 && share < e.cfg.Workers {
			p.MaxConcurrency = share
		}
		if old, ok := e.gates[name]; ok && e.gatePolicy[name] == p {
			gates[name] = old
		} else {
			gates[name] = newGate(name, p, e.metrics, e.log)
			gates[name].free = func(tools []string) { e.deferrer.wake(tools) } // the deferrer comes after the first gates
			gates[name].room = func() {
				e.floor.wantFull()
				e.wakeFor(causeSlots)
			}
			e.gatePolicy[name] = p
		}
		gates[name].setRoutes(routesOf[name])
		gates[name].waitCap.Store(int32(waitCap))
	}
	e.gates = gates
	rt.gates = gates
}
