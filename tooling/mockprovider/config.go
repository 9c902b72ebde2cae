package mockprovider

import "time"

// Config configures a Provider. The zero value is a well-behaved provider with
// no faults and no latency.
//
// The random fault rates are fractions in [0, 1] (values outside are
// clamped). They are mutually exclusive and drawn once per request that would
// apply the effect, in this order: Fail503, Fail429, Fail529, Timeout,
// ResetAfterEffect; if they add up to more than 1, the later ones get what is
// left. Replays, conflicts, terminal tools and FailFirstN answers are never
// subject to random faults.
type Config struct {
	// Seed makes the fault choices reproducible (see the package doc).
	Seed int64

	// Fail503 is the fraction of requests answered 503 Service Unavailable.
	Fail503 float64
	// Fail429 is the fraction answered 429 Too Many Requests, with
	// "Retry-After: RetryAfterSeconds".
	Fail429 float64
	// Fail529 is the fraction answered 529 (overloaded).
	Fail529 float64
	// Timeout is the fraction of requests that sleep TimeoutDelay and then
	// answer 504, so that a client with a shorter timeout gives up first. The
	// key stays in flight during the sleep: a concurrent retry gets 409.
	Timeout float64
	// ResetAfterEffect is the fraction of requests that apply the effect and
	// then close the connection without answering: the ambiguous case. A
	// retry with the same key gets a replay.
	ResetAfterEffect float64

	// RetryAfterSeconds is the Retry-After value sent with 429. A negative
	// value sends no Retry-After header.
	RetryAfterSeconds int
	// TimeoutDelay is how long a Timeout fault sleeps before answering.
	TimeoutDelay time.Duration
	// Latency is added to every request that passes validation, before any
	// other processing. A client that goes away during it is not processed.
	Latency time.Duration

	// TerminalTools maps a tool name to the HTTP status always returned for
	// it (e.g. 422). The tool name is the last segment of the request path,
	// path-unescaped. These answers apply no effect and store nothing.
	TerminalTools map[string]int

	// FailFirstN makes the first N requests of every key fail with 503
	// before any idempotency processing (never with an effect), so every key
	// needs exactly N retries.
	FailFirstN int

	// ApplyEffectBeforeFault applies (and stores) the effect before answering
	// a random 5xx fault (Fail503, Fail529) or sleeping for a Timeout fault:
	// a provider that did the work but failed to say so. A retry gets a
	// replay of the success.
	ApplyEffectBeforeFault bool

	// LoseAnswer lists keys whose answer is lost once: the first request of
	// such a key that applies the effect then closes the connection without
	// answering (counted in Resets), as ResetAfterEffect does at random. A
	// retry with the same key gets the replay. Other faults still apply.
	LoseAnswer map[string]bool

	// VerifyTuple, when set, answers 400 to a request whose
	// X-Agent-Idempotency-Tuple header is missing, is not unpadded base64url,
	// or does not hash to its Idempotency-Key under the contract's key scheme
	// ("idem_v1_" + first 32 hex digits of SHA-256 of the decoded tuple).
	VerifyTuple bool
}
