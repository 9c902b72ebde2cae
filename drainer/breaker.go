package drainer

import (
	"sync"
	"time"
)

// breakerState is the state of an adapter's circuit breaker, numbered as
// drainer_circuit_breaker_state exports it.
type breakerState int

const (
	breakerClosed   breakerState = 0 // requests go out
	breakerHalfOpen breakerState = 1 // one probe is under way; the others wait
	breakerOpen     breakerState = 2 // nothing goes out until the next probe is due
)

func (s breakerState) String() string {
	switch s {
	case breakerHalfOpen:
		return "half-open"
	case breakerOpen:
		return "open"
	}
	return "closed"
}

// verdict is what one attempt says of the provider's health.
type verdict int

const (
	// verdictNeutral: the attempt says nothing of the provider (never
	// sent, cancelled, one route's credentials refused).
	verdictNeutral verdict = iota
	verdictSuccess         // the provider answered
	verdictFailure         // the provider looks down
)

const (
	// breakerFirstProbe is the wait, once the breaker opens, before its
	// first probe (open_for if shorter): a provider restarted under load is
	// back in seconds, and an adapter must not stay frozen for a whole
	// open_for after it is. Each failed probe doubles the wait, up to
	// open_for.
	breakerFirstProbe = time.Second
	// breakerProbeLost: a probe without a verdict for this long (the
	// attempt never reported) no longer keeps the others waiting.
	breakerProbeLost = time.Minute
)

// breakerTransition is one change of a breaker's state, as reported to its
// owner (under the breaker's lock, so transitions arrive in order).
type breakerTransition struct {
	from, to breakerState
	at       time.Time
	// cause is the label the attempt whose verdict caused the change was
	// admitted with (its route); empty when a probe was admitted.
	cause string
	// nextProbe is, on a change to open, the wait before the next probe.
	nextProbe time.Duration
	// openedAt is when the breaker last opened from closed; failedProbes
	// counts the probes that failed since.
	openedAt     time.Time
	failedProbes int
}

// breaker is a circuit breaker: closed, it opens after failures consecutive
// failures; open, it refuses every request until a probe is due, then lets
// exactly one through (half-open). A successful probe closes it; a failed
// one opens it again for twice the previous wait (the first is
// breakerFirstProbe), up to openFor. A neutral probe lets the next request
// probe at once. Verdicts on requests admitted before the last change of
// state are ignored: they describe the provider as it was.
//
// It is safe for concurrent use. onChange is called with the lock held and
// must not call back into the breaker.
type breaker struct {
	failures int
	openFor  time.Duration
	now      func() time.Time
	onChange func(breakerTransition)

	mu    sync.Mutex
	state breakerState
	gen   uint64 // bumped at each change of state and each probe
	run   int    // consecutive failures, while closed
	// failedProbes since it opened; the next wait is wait(failedProbes).
	failedProbes int
	openedAt     time.Time
	probeAt      time.Time // open: when the next probe may go
	probeSent    time.Time // half-open: when the probe went (zero: none under way)
}

// newBreaker returns a closed breaker. openFor <= 0 caps the waits at
// breakerFirstProbe.
func newBreaker(failures int, openFor time.Duration, now func() time.Time, onChange func(breakerTransition)) *breaker {
	if openFor <= 0 {
		openFor = breakerFirstProbe
	}
	if onChange == nil {
		onChange = func(breakerTransition) {}
	}
	return &breaker{failures: max(failures, 1), openFor: openFor, now: now, onChange: onChange}
}

// wait is the wait before the next probe after k failed probes.
func (b *breaker) wait(k int) time.Duration {
	first := min(breakerFirstProbe, b.openFor)
	if k >= 62 || first > b.openFor>>k { // first<<k would pass openFor (or overflow)
		return b.openFor
	}
	return first << k
}

// allow asks to send one request labelled cause (its route). If the
// breaker lets it through, the caller must call done with the attempt's
// verdict (later calls are ignored). If not, retryIn is how long until a
// probe may go: 0 while a probe is under way.
func (b *breaker) allow(cause string) (done func(verdict), retryIn time.Duration, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	switch b.state {
	case breakerOpen:
		if now.Before(b.probeAt) {
			return nil, b.probeAt.Sub(now), false
		}
		b.to(breakerHalfOpen, "", now)
		b.probeSent = now
	case breakerHalfOpen:
		if !b.probeSent.IsZero() && now.Sub(b.probeSent) < breakerProbeLost {
			return nil, 0, false
		}
		b.gen++ // this request probes instead: the lost probe's verdict no longer counts
		b.probeSent = now
	}
	gen := b.gen
	var once sync.Once
	return func(v verdict) { once.Do(func() { b.report(gen, v, cause) }) }, 0, true
}

// report applies the verdict of a request admitted in generation gen.
func (b *breaker) report(gen uint64, v verdict, cause string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if gen != b.gen {
		return
	}
	now := b.now()
	switch b.state {
	case breakerClosed:
		switch v {
		case verdictSuccess:
			b.run = 0
		case verdictFailure:
			if b.run++; b.run >= b.failures {
				b.failedProbes, b.openedAt = 0, now
				b.to(breakerOpen, cause, now)
			}
		}
	case breakerHalfOpen:
		switch v {
		case verdictSuccess:
			b.to(breakerClosed, cause, now)
			b.run, b.failedProbes = 0, 0
		case verdictFailure:
			b.failedProbes++
			b.to(breakerOpen, cause, now)
		default:
			b.probeSent = time.Time{} // the next request probes
		}
	}
}

// to changes the state, with the lock held.
func (b *breaker) to(s breakerState, cause string, now time.Time) {
	tr := breakerTransition{from: b.state, to: s, at: now, cause: cause, openedAt: b.openedAt, failedProbes: b.failedProbes}
	b.state = s
	b.gen++
	if s == breakerOpen {
		tr.nextProbe = b.wait(b.failedProbes)
		b.probeAt = now.Add(tr.nextProbe)
	}
	b.onChange(tr)
}

// current returns the state.
func (b *breaker) current() breakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}
