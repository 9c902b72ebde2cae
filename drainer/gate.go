package drainer

import (
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
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

	authMu sync.Mutex
	routes map[string]bool  // the routes (tools) of the loaded config sending to this adapter
	held   map[string]*hold // route -> its auth hold
	whole  *hold            // the whole adapter, once several routes are refused alike
}

// hold is one auth hold: of a route, or of the whole adapter.
type hold struct {
	since time.Time // when the first refusal of this hold came
	until time.Time // nothing is sent before
	count int       // refusals since the hold began: each lengthens the next
	// probeAt: the hold is over and one request (the recheck) went out at
	// that moment; until its answer the others wait.
	probeAt time.Time
}

// wholeAdapter is the route label of a hold of the whole adapter.
const wholeAdapter = "*"

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
	g := &gate{name: name, log: log, routes: map[string]bool{}, held: map[string]*hold{}}
	if p.BreakerFailures > 0 {
		g.breaker = newBreaker(p.BreakerFailures, p.BreakerOpenFor, now, func(tr breakerTransition) {
			g.logBreaker(tr)
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

// Auth holds: after the provider refuses the credentials on a route, that
// route sends nothing for authHoldBase, doubling with each refusal that
// follows a hold, up to authHoldCap. Once a hold is over one request goes
// out to recheck (the others wait, authProbeWait at a time); any other
// answer ends the hold. When several routes of an adapter are refused alike
// (or its only route is), the whole adapter is held the same way. Rows wait
// without consuming attempts (a broken credential is not the rows' fault),
// deferred in bulk rather than looked at one by one; other routes of the
// adapter, and other adapters, are not delayed.
const (
	authHoldBase  = time.Second
	authHoldCap   = 5 * time.Minute
	authProbeWait = 500 * time.Millisecond
	// authProbeLost: a recheck without an answer for this long (its worker
	// died with the lease) no longer keeps the others waiting.
	authProbeLost = time.Minute
)

// admit reserves a slot, a rate token and a breaker permit for a row of
// route (its tool), the token only if it is free now. On success the
// caller must call the returned done with the attempt's result.
func (g *gate) admit(r *rand.Rand, route string) (done func(dispatch.Result), ref *refusal) {
	done, _, ref = g.admitWithin(r, route, 0)
	return done, ref
}

// admitWithin is admit, taking a rate token that comes free within maxWait
// too: the caller waits wait before its attempt. A row turned away for a
// token later than that goes back to pending and comes due when it is
// free; one that waits in its worker instead keeps the route at its rate
// (turned away, the rows of a route limited to 20/s with a burst of 1 went
// out about once a poll).
func (g *gate) admitWithin(r *rand.Rand, route string, maxWait time.Duration) (done func(dispatch.Result), wait time.Duration, ref *refusal) {
	probing, left := g.holdAdmit(route)
	if left > 0 {
		return nil, 0, &refusal{reason: outbox.RefusedAuthHold, delay: left + jitterAround(r, left/4+10*time.Millisecond)}
	}
	refuse := func(ref *refusal) (func(dispatch.Result), time.Duration, *refusal) {
		g.unprobe(probing)
		return nil, 0, ref
	}
	if g.slots != nil {
		select {
		case g.slots <- struct{}{}:
		default:
			return refuse(&refusal{reason: outbox.RefusedSaturated, delay: jitterAround(r, 500*time.Millisecond)})
		}
	}
	release := func() {
		if g.slots != nil {
			<-g.slots
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

// holdAdmit checks the adapter's hold and route's: how long the row must
// still wait, or, when a hold is over, the holds this row rechecks.
func (g *gate) holdAdmit(route string) (probing []*hold, left time.Duration) {
	g.authMu.Lock()
	defer g.authMu.Unlock()
	now := time.Now()
	for _, h := range []*hold{g.whole, g.held[route]} {
		switch {
		case h == nil:
		case now.Before(h.until):
			left = max(left, h.until.Sub(now))
		case !h.probeAt.IsZero() && now.Sub(h.probeAt) < authProbeLost:
			left = max(left, authProbeWait)
		default:
			probing = append(probing, h)
		}
	}
	if left > 0 {
		return nil, left
	}
	for _, h := range probing {
		h.probeAt = now
	}
	return probing, 0
}

// unprobe lets another row recheck the holds a refused row would have.
func (g *gate) unprobe(probing []*hold) {
	if len(probing) == 0 {
		return
	}
	g.authMu.Lock()
	defer g.authMu.Unlock()
	for _, h := range probing {
		h.probeAt = time.Time{}
	}
}

// holdFor is the length of a hold after count refusals that followed holds.
func holdFor(count int) time.Duration {
	if count >= 20 {
		return authHoldCap
	}
	return min(authHoldCap, authHoldBase<<count)
}

// noteAuth starts or lengthens the auth hold of route on a refusal of the
// credentials, and that of the whole adapter once several of its routes are
// held; an answer that shows the credentials work ends both. It reports
// whether the whole adapter is held (only then does a refusal count toward
// the breaker: one route's refusal says nothing of the provider's health).
func (g *gate) noteAuth(route string, res dispatch.Result) (wholeHeld bool) {
	type event struct {
		start bool
		route string
		since time.Time
	}
	var events []event
	g.authMu.Lock()
	now := time.Now()
	switch {
	case res.Outcome == dispatch.Auth:
		h := g.held[route]
		switch {
		case h == nil:
			h = &hold{since: now}
			g.held[route] = h
			events = append(events, event{start: true, route: route})
		case now.Before(h.until):
			// sent before the hold began: one hold per round
		default:
			h.count++
		}
		if !now.Before(h.until) {
			h.until, h.probeAt = now.Add(holdFor(h.count)), time.Time{}
		}
		switch w := g.whole; {
		case w == nil && len(g.held) >= min(2, max(len(g.routes), 1)):
			g.whole = &hold{since: now, until: now.Add(holdFor(0))}
			events = append(events, event{start: true, route: wholeAdapter})
		case w != nil && !now.Before(w.until):
			w.count++
			w.until, w.probeAt = now.Add(holdFor(w.count)), time.Time{}
		}
	case res.Reason == dispatch.ReasonUnsendable:
		// Never sent: says nothing about the credentials.
		for _, h := range []*hold{g.whole, g.held[route]} {
			if h != nil {
				h.probeAt = time.Time{}
			}
		}
	case res.Succeeded() || res.Outcome == dispatch.Terminal || res.Status > 0:
		if h := g.held[route]; h != nil {
			delete(g.held, route)
			events = append(events, event{route: route, since: h.since})
		}
		if g.whole != nil {
			events = append(events, event{route: wholeAdapter, since: g.whole.since})
			g.whole = nil
		}
	default:
		// No answer (connection error, timeout): the recheck is still owed.
		for _, h := range []*hold{g.whole, g.held[route]} {
			if h != nil {
				h.probeAt = time.Time{}
			}
		}
	}
	wholeHeld = g.whole != nil
	g.authMu.Unlock()
	for _, ev := range events {
		if ev.start {
			g.log.Warn("auth hold started: the provider refused the credentials; rows wait without consuming attempts",
				"adapter", g.name, "route", ev.route)
		} else {
			g.log.Info("auth hold ended: the provider accepted the credentials", "adapter", g.name, "route", ev.route,
				"held_for", now.Sub(ev.since).Round(time.Millisecond))
		}
	}
	return wholeHeld
}

// holdLeft is how long rows of route are still held back, 0 if they are not.
func (g *gate) holdLeft(route string) time.Duration {
	if g == nil {
		return 0
	}
	g.authMu.Lock()
	defer g.authMu.Unlock()
	var left time.Duration
	for _, h := range []*hold{g.whole, g.held[route]} {
		if h != nil {
			left = max(left, time.Until(h.until))
		}
	}
	return left
}

// setRoutes records the routes sending to this adapter and forgets the
// holds of routes no longer among them.
func (g *gate) setRoutes(routes map[string]bool) {
	g.authMu.Lock()
	defer g.authMu.Unlock()
	g.routes = routes // nil: none
	for r := range g.held {
		if !routes[r] {
			delete(g.held, r)
		}
	}
	if len(g.held) == 0 {
		g.whole = nil
	}
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
	if res.Reason == dispatch.ReasonNotReady || res.Reason == dispatch.ReasonUnsendable {
		return verdictNeutral // the adapter did not ask its provider
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
			if res.Reason == dispatch.ReasonCancelled {
				return verdictNeutral
			}
			return verdictFailure // connection refused, reset, timeout
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
// at most three quarters of them, so one slow provider cannot starve the others.
func (e *Engine) attachGates(rt *Routing) {
	rt.durableClaims = len(rt.NonIdempotentTools()) > 0
	rt.orderedTools = rt.OrderedTools()
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
	for _, name := range names {
		p := rt.Policies[name]
		if p.MaxConcurrency == 0 && len(names) > 1 && e.cfg.Workers > 1 {
			p.MaxConcurrency = max(1, e.cfg.Workers*3/4)
		}
		if old, ok := e.gates[name]; ok && e.gatePolicy[name] == p {
			gates[name] = old
		} else {
			gates[name] = newGate(name, p, e.metrics, e.log)
			e.gatePolicy[name] = p
		}
		gates[name].setRoutes(routesOf[name])
	}
	e.gates = gates
	rt.gates = gates
}
