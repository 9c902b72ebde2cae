package mockprovider

import "sync/atomic"

// Stats counts requests by answer class. Once the provider is quiescent,
// the answer classes (every field but Requests, Effects and
// EffectsBeforeFault) add up to Requests.
type Stats struct {
	Requests int // every request received

	Effects            int // effects applied (one per key for a correct provider)
	EffectsBeforeFault int // effects applied under ApplyEffectBeforeFault, answered with a fault

	Successes         int // 200 answers that applied the effect now
	Replays           int // 200 answers replayed from the store
	Mismatches        int // 409 with Idempotency-Conflict: payload-mismatch
	InFlightConflicts int // 409: the key was being processed by another request
	BadRequests       int // 400 or 413: missing key, invalid JSON, bad tuple, body too large
	Terminal          int // TerminalTools answers
	Unavailable       int // 503, from Fail503 or FailFirstN
	RateLimited       int // 429
	Overloaded        int // 529
	Timeouts          int // 504 after TimeoutDelay (or when the client left during it)
	Resets            int // connections closed after the effect without an answer
	Aborted           int // client left (or the provider closed) during Latency
}

type counters struct {
	requests, effects, effectsBeforeFault                    atomic.Int64
	successes, replays, mismatches, inFlight, badRequests    atomic.Int64
	terminal, unavailable, rateLimited, overloaded, timeouts atomic.Int64
	resets, aborted                                          atomic.Int64
}

// TotalEffects returns the number of effects applied over all keys.
func (p *Provider) TotalEffects() int { return int(p.st.effects.Load()) }

// Requests returns the number of requests received.
func (p *Provider) Requests() int { return int(p.st.requests.Load()) }

// Replays returns the number of answers replayed from the idempotency store.
func (p *Provider) Replays() int { return int(p.st.replays.Load()) }

// Snapshot returns the current counters. Counters are read one by one, so a
// snapshot taken under load is not atomic across fields.
func (p *Provider) Snapshot() Stats {
	s := &p.st
	return Stats{
		Requests:           int(s.requests.Load()),
		Effects:            int(s.effects.Load()),
		EffectsBeforeFault: int(s.effectsBeforeFault.Load()),
		Successes:          int(s.successes.Load()),
		Replays:            int(s.replays.Load()),
		Mismatches:         int(s.mismatches.Load()),
		InFlightConflicts:  int(s.inFlight.Load()),
		BadRequests:        int(s.badRequests.Load()),
		Terminal:           int(s.terminal.Load()),
		Unavailable:        int(s.unavailable.Load()),
		RateLimited:        int(s.rateLimited.Load()),
		Overloaded:         int(s.overloaded.Load()),
		Timeouts:           int(s.timeouts.Load()),
		Resets:             int(s.resets.Load()),
		Aborted:            int(s.aborted.Load()),
	}
}
