package drainer

import (
	"time"

	"github.com/drainer-io/drainer/dispatch"
)

// An adapter's auth holds (gate.held, gate.whole): what a refusal of the
// credentials holds back, and for how long.

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
	// authHoldLapse: a hold over for this long with no row come to
	// recheck it holds nothing back (the replica has no rows of the route:
	// another replica's request may well have ended its own hold). It
	// lapses: /readyz and drainer_hold_seconds stop reporting it, so a page
	// on a long hold clears once the credentials are fixed, and the next
	// row goes out as usual.
	authHoldLapse = time.Minute
)

// lapseLocked drops the holds over for g.lapse with no recheck under way;
// g.authMu is held.
func (g *gate) lapseLocked(now time.Time) {
	lapsed := func(h *hold) bool {
		return h != nil && h.probeAt.IsZero() && now.Sub(h.until) >= g.lapse
	}
	var gone []string
	for r, h := range g.held {
		if lapsed(h) {
			delete(g.held, r)
			gone = append(gone, r)
		}
	}
	if lapsed(g.whole) {
		g.whole = nil
		gone = append(gone, wholeAdapter)
	}
	for _, r := range gone {
		g.log.Info("auth hold lapsed: no row came to recheck the credentials after it ended", "adapter", g.name, "route", r,
			"ended_ago", g.lapse.Round(time.Second))
	}
}

// holdAdmit checks the adapter's hold and route's: how long the row must
// still wait, or, when a hold is over, the holds this row rechecks.
func (g *gate) holdAdmit(route string) (probing []*hold, left time.Duration) {
	g.authMu.Lock()
	defer g.authMu.Unlock()
	now := time.Now()
	g.lapseLocked(now)
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
	var freed []string // the routes whose rows may go out again
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
			freed = []string{route}
		}
		if g.whole != nil {
			events = append(events, event{route: wholeAdapter, since: g.whole.since})
			g.whole = nil
			freed = g.routeListLocked()
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
	if len(freed) > 0 && g.free != nil {
		g.free(freed)
	}
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

// routeList lists the routes sending to this adapter.
func (g *gate) routeList() []string {
	g.authMu.Lock()
	defer g.authMu.Unlock()
	return g.routeListLocked()
}

func (g *gate) routeListLocked() []string {
	tools := make([]string, 0, len(g.routes))
	for r := range g.routes {
		tools = append(tools, r)
	}
	return tools
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
