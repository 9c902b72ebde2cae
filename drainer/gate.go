package drainer

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/sony/gobreaker/v2"
	"golang.org/x/time/rate"
)

// gate protects one adapter: a circuit breaker, a rate limit and a
// concurrency cap. Rows that a gate turns away go back to pending without
// consuming an attempt.
type gate struct {
	name    string
	breaker *gobreaker.TwoStepCircuitBreaker[struct{}]
	openFor time.Duration
	openAt  atomic.Int64 // unix nanos of the last transition to open
	limiter *rate.Limiter
	slots   chan struct{} // nil: no cap

	authMu    sync.Mutex
	authCount int       // consecutive holds
	authUntil time.Time // no dispatch before
}

// Breaker outcomes reported through done.
var (
	errBreakerFailure = errors.New("provider unavailable")
	errBreakerNeutral = errors.New("neither success nor failure")
)

// GatePolicy is the protective policy of one adapter.
type GatePolicy struct {
	// BreakerFailures opens the breaker after this many consecutive
	// failures (529/503/502/504, auth, connection); 0 disables it.
	BreakerFailures int
	BreakerOpenFor  time.Duration
	// RatePerSecond and Burst limit dispatches; 0 means unlimited.
	RatePerSecond float64
	Burst         int
	// MaxConcurrency caps calls under way; 0 means no cap.
	MaxConcurrency int
}

func newGate(name string, p GatePolicy, m *Metrics) *gate {
	g := &gate{name: name, openFor: p.BreakerOpenFor}
	if p.BreakerFailures > 0 {
		failures := uint32(p.BreakerFailures)
		g.breaker = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
			Name:        name,
			MaxRequests: 1, // one probe while half-open
			Timeout:     p.BreakerOpenFor,
			ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
			IsExcluded:  func(err error) bool { return errors.Is(err, errBreakerNeutral) },
			OnStateChange: func(_ string, _, to gobreaker.State) {
				if to == gobreaker.StateOpen {
					g.openAt.Store(time.Now().UnixNano())
				}
				if m != nil {
					m.CircuitBreakerState.WithLabelValues(name).Set(breakerGauge(to))
				}
			},
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

func breakerGauge(s gobreaker.State) float64 {
	switch s {
	case gobreaker.StateHalfOpen:
		return 1
	case gobreaker.StateOpen:
		return 2
	}
	return 0
}

// refusal says why a gate turned a row away and when to look at it again.
type refusal struct {
	reason string // one of the outbox.Refused* reasons
	delay  time.Duration
}

// Auth holds: after the provider refuses the adapter's credentials, the
// adapter sends nothing for authHoldBase, doubling with each refusal that
// follows a hold, up to authHoldCap; any other answer ends it. Rows wait
// without consuming attempts (a broken credential is not the rows' fault),
// and whether or not a breaker is configured they no longer cycle once a
// second writing audit entries.
const (
	authHoldBase = time.Second
	authHoldCap  = 5 * time.Minute
)

// admit reserves a slot, a rate token and a breaker permit. On success the
// caller must call the returned done with the attempt's result.
func (g *gate) admit(r *rand.Rand) (done func(dispatch.Result), ref *refusal) {
	if left := g.authHoldLeft(); left > 0 {
		return nil, &refusal{reason: outbox.RefusedAuthHold, delay: left + jitterAround(r, left/4+10*time.Millisecond)}
	}
	if g.slots != nil {
		select {
		case g.slots <- struct{}{}:
		default:
			return nil, &refusal{reason: outbox.RefusedSaturated, delay: jitterAround(r, 500*time.Millisecond)}
		}
	}
	release := func() {
		if g.slots != nil {
			<-g.slots
		}
	}
	if g.limiter != nil {
		res := g.limiter.Reserve()
		if d := res.Delay(); d > 0 {
			res.Cancel()
			release()
			return nil, &refusal{reason: outbox.RefusedRateLimited, delay: d + jitterAround(r, 20*time.Millisecond)}
		}
	}
	var breakerDone func(error)
	if g.breaker != nil {
		var err error
		breakerDone, err = g.breaker.Allow()
		if err != nil {
			release()
			return nil, &refusal{reason: outbox.RefusedBreakerOpen, delay: g.remainingOpen(r)}
		}
	}
	var once sync.Once
	return func(res dispatch.Result) {
		once.Do(func() {
			if breakerDone != nil {
				breakerDone(breakerVerdict(res))
			}
			g.noteAuth(res)
			release()
		})
	}, nil
}

// noteAuth starts or lengthens the auth hold on a refusal of the
// credentials, and ends it on any answer that shows they work.
func (g *gate) noteAuth(res dispatch.Result) {
	g.authMu.Lock()
	defer g.authMu.Unlock()
	now := time.Now()
	switch {
	case res.Outcome == dispatch.Auth:
		if now.Before(g.authUntil) {
			return // attempts sent before the hold began: one hold per round
		}
		hold := authHoldCap
		if g.authCount < 20 {
			hold = min(authHoldCap, authHoldBase<<g.authCount)
		}
		g.authCount++
		g.authUntil = now.Add(hold)
	case res.Succeeded() || res.Outcome == dispatch.Terminal || res.Status > 0:
		g.authCount = 0
		g.authUntil = time.Time{}
	}
}

// authHoldLeft is how long the adapter is still held back, 0 if it is not.
func (g *gate) authHoldLeft() time.Duration {
	if g == nil {
		return 0
	}
	g.authMu.Lock()
	defer g.authMu.Unlock()
	return max(0, time.Until(g.authUntil))
}

// remainingOpen is how long the breaker stays open, jittered so the rows it
// turned away do not all return at the same instant.
func (g *gate) remainingOpen(r *rand.Rand) time.Duration {
	left := g.openFor - time.Since(time.Unix(0, g.openAt.Load()))
	if left < 100*time.Millisecond || left > g.openFor {
		left = 100 * time.Millisecond // half-open: another row is probing
	}
	return left + jitterAround(r, left/4+10*time.Millisecond)
}

// breakerVerdict: provider-down signals are failures; answers that show the
// provider is up (success, replay, terminal 4xx) are successes; the rest is
// neutral.
func breakerVerdict(res dispatch.Result) error {
	if res.Reason == dispatch.ReasonNotReady {
		return errBreakerNeutral // the adapter did not ask its provider
	}
	switch res.Outcome {
	case dispatch.Success, dispatch.Replay, dispatch.Terminal:
		return nil
	case dispatch.Auth:
		return errBreakerFailure
	case dispatch.Retry, dispatch.Ambiguous:
		switch res.Status {
		case 502, 503, 504, 529:
			return errBreakerFailure
		case 0:
			if res.Reason == "cancelled" {
				return errBreakerNeutral
			}
			return errBreakerFailure // connection refused, reset, timeout
		}
	}
	return errBreakerNeutral
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
	for _, name := range names {
		p := rt.Policies[name]
		if p.MaxConcurrency == 0 && len(names) > 1 && e.cfg.Workers > 1 {
			p.MaxConcurrency = max(1, e.cfg.Workers*3/4)
		}
		if old, ok := e.gates[name]; ok && e.gatePolicy[name] == p {
			gates[name] = old
			continue
		}
		gates[name] = newGate(name, p, e.metrics)
		e.gatePolicy[name] = p
	}
	e.gates = gates
	rt.gates = gates
}
