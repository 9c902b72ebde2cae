package dispatch

import (
	"context"
	"encoding/json"
	"time"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/outbox"
)

// Message is one delivery attempt of one outbox row.
type Message struct {
	// Key is the row's idempotency key. Adapters send it upstream as the
	// idempotency key on every attempt; it never changes across retries.
	Key   string
	Tuple idemkey.Tuple
	// Kind is outbox.KindForward or outbox.KindCompensation.
	Kind outbox.Kind
	// Payload is the row's JSON payload, sent as-is (or re-encoded by adapters
	// whose provider wants another format). It never names where to send.
	Payload json.RawMessage
	// Attempt counts consumed attempts including this one (1 on the first).
	Attempt int
	// Seq is the row's enqueue sequence number.
	Seq int64
	// Traceparent is the W3C trace context recorded at enqueue, or empty.
	Traceparent string
}

// Adapter makes one delivery attempt. Implementations must be safe for
// concurrent use, must send m.Key upstream as the idempotency key on every
// attempt, must honour ctx (its deadline is derived from the row's lease), and
// must return errors that carry no secret, header value or payload.
type Adapter interface {
	Dispatch(ctx context.Context, m *Message) Result
}

// AdapterFunc adapts a function to the Adapter interface.
type AdapterFunc func(ctx context.Context, m *Message) Result

// Dispatch calls f(ctx, m).
func (f AdapterFunc) Dispatch(ctx context.Context, m *Message) Result { return f(ctx, m) }

// Outcome classifies one attempt.
type Outcome uint8

const (
	// OutcomeUnknownZero is the zero value: an adapter that returns it has a
	// bug; the engine treats it as Ambiguous.
	OutcomeUnknownZero Outcome = iota
	// Success: the provider confirmed the effect.
	Success
	// Replay: the provider answered from its idempotency cache: the effect
	// happened on an earlier attempt. Still a success.
	Replay
	// Retry: the provider answered with a transient failure, or the request
	// was never sent. Try again with the same key, not before RetryAfter.
	Retry
	// Terminal: the request can never succeed; never retry.
	Terminal
	// Ambiguous: no answer after the request may have reached the provider
	// (timeout, connection reset). Retried with the same key on routes whose
	// provider honours keys; parked as outcome_unknown on non_idempotent routes.
	Ambiguous
	// Auth: the provider refused the credentials (401, 403, 407). The adapter
	// is broken, not the row: no attempt is consumed.
	Auth
)

var outcomeNames = [...]string{"invalid", "success", "replay", "retry", "terminal", "ambiguous", "auth"}

// String returns the outcome's metric label.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "invalid"
}

// Result is the classified answer of one attempt.
type Result struct {
	Outcome Outcome
	// RetryAfter is a floor under the next delay (from Retry-After or a
	// provider hint); 0 means none.
	RetryAfter time.Duration
	// NotSent is true when the adapter knows the request never left this
	// process or was refused before the provider could act on it (for example
	// a connection that could not be opened). Such a retry is safe even on
	// non_idempotent routes. The zero value assumes it may have been sent.
	NotSent bool
	// Refused is true when the provider answered that it did not act on
	// the request: a refusal it sent back (a JetStream error
	// acknowledgement, a statement the server rolled back, a broker's error
	// code). The request reached the provider, so the attempt counts
	// (docs/reference.md §2) and a row refused every time ends at its
	// route's max_attempts; a retry is safe even on non_idempotent routes.
	// NotSent is for a request that never reached the provider (or a
	// refusal that waits for an operator's fix, such as a missing stream):
	// set one or the other.
	Refused bool
	// Down, with Refused, says the refusal is the provider's own
	// unavailability (overloaded, shutting down, no leader, out of
	// connections), which counts toward the circuit breaker as a 503
	// does. A refusal of this request alone (a serialization failure, a
	// deadlock, a full stream) leaves the breaker alone: the provider
	// answered, and its other rows can go through.
	Down bool
	// AwaitsFix, with Retry and NotSent, says the provider lacks the row's
	// destination (a missing topic, stream, table or tool; a stream
	// configured otherwise): nothing was sent, and nothing will be until an
	// operator fixes it. The provider answered for this destination alone,
	// so the circuit breaker does not count it and the adapter's other
	// routes go on. A forward row waits without consuming an attempt; a
	// compensation row counts it, so its route's max_attempts bounds it
	// (docs/reference.md §6): a saga whose undo cannot be sent ends
	// compensation_failed, which pages, instead of waiting unseen.
	AwaitsFix bool
	// Unread, with Ambiguous, says the provider answered but the adapter
	// could not read the answer whole (it is larger than the adapter reads
	// of one): the request reached the provider, which may have acted, and
	// what it said is unknown. Sending again would get the same answer or
	// act twice, so the row parks as outcome_unknown at once, whatever its
	// route's class, for a human to check with the provider and resolve.
	Unread bool
	// Status is the provider's status code (HTTP status, or 0).
	Status int
	// Response is the provider's answer for the agent to read: a JSON body,
	// or {"body": "<text, truncated>"}. Set on Success and Replay.
	Response json.RawMessage
	// Problem holds RFC 9457 problem details when the provider sent them.
	Problem *Problem
	// Reason is a short fixed-vocabulary cause, e.g. "http_503", "timeout".
	Reason string
	// Err is the redacted cause; nil on success.
	Err error
	// Record is the provider's whole answer as a caller replays it, for
	// adapters whose answer is more than Response holds (an MCP tool
	// result: content, structuredContent, isError). It is kept beside the
	// row (drainer.call_records) when the row settles, so the MCP gateway
	// answers every retry of the call with exactly what the first got.
	Record json.RawMessage
}

// ReasonNotReady is the Reason of a Retry, NotSent that says the adapter is
// not ready to send the row yet (its provider has not been reachable since
// startup and it keeps connecting in the background, or the provider lacks
// the row's tool): the row waits without an attempt, and the circuit breaker
// does not count it, since the provider was not asked.
const ReasonNotReady = "not_ready"

// ReasonUnsendable is the Reason of a Terminal, NotSent that says the row
// can never be sent as it stands: its payload cannot build the request its
// route describes (a path variable's field is missing, of another type, or
// not a valid segment). The row fails at once without consuming an attempt;
// the circuit breaker and auth holds do not count it, since the provider was
// not asked. Err names the field, never its value.
const ReasonUnsendable = "unsendable"

// Succeeded reports whether the outcome confirms the effect.
func (r Result) Succeeded() bool { return r.Outcome == Success || r.Outcome == Replay }

// Problem is an RFC 9457 problem details object.
type Problem struct {
	Type     string `json:"type,omitempty"`
	Title    string `json:"title,omitempty"`
	Status   int    `json:"status,omitempty"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
}

// KeyTTLer is implemented by adapters whose provider's idempotency window is
// read from the provider itself (a NATS stream's duplicate window, River's
// completed-job retention). It is read at start: the default key_ttl when
// the config leaves it unset, and a bound on every key_ttl of the adapter.
// A window read at start is read again every minute while the daemon runs
// (dispatch/builtin), so a changed window reaches the key-TTL guard
// (Entry.KeyTTLFor) within that interval.
type KeyTTLer interface {
	KeyTTL(ctx context.Context) (time.Duration, error)
}
