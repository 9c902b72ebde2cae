package outbox

import "slices"

// Row statuses (docs/reference.md §2).
const (
	StatusPending            = "pending"
	StatusInFlight           = "in_flight"
	StatusSucceeded          = "succeeded"
	StatusFailed             = "failed"
	StatusOutcomeUnknown     = "outcome_unknown"
	StatusCompensated        = "compensated"
	StatusCompensationFailed = "compensation_failed"
	StatusCancelled          = "cancelled"
)

// Statuses lists every status, in life-cycle order.
var Statuses = []string{
	StatusPending, StatusInFlight, StatusSucceeded, StatusFailed,
	StatusOutcomeUnknown, StatusCompensated, StatusCompensationFailed, StatusCancelled,
}

// Terminal reports whether a row of status never changes again by itself.
func Terminal(status string) bool {
	switch status {
	case StatusSucceeded, StatusFailed, StatusCompensated, StatusCancelled:
		return true
	}
	return false
}

// Parked reports whether a row of status waits for a human (drainer resolve).
func Parked(status string) bool {
	return status == StatusOutcomeUnknown || status == StatusCompensationFailed
}

// ValidStatus reports whether s is one of the eight statuses.
func ValidStatus(s string) bool { return slices.Contains(Statuses, s) }

// Row kinds.
const (
	KindForward      = "forward"
	KindCompensation = "compensation"
)

// Idempotency classes of a route (docs/reference.md §4).
const (
	ClassNaturallyIdempotent = "naturally_idempotent" // repeating the call is harmless
	ClassKeyIdempotent       = "key_idempotent"       // the provider dedupes by the key
	ClassNonIdempotent       = "non_idempotent"       // an ambiguous attempt is never retried blindly
)

// Classes lists the route classes.
var Classes = []string{ClassNaturallyIdempotent, ClassKeyIdempotent, ClassNonIdempotent}

// Ordering modes of a route.
const (
	OrderingNone          = "none"
	OrderingBusinessScope = "business_scope" // one row at a time per business_scope, in enqueue order
)

// Saga states (runs.saga_state).
const (
	SagaWaiting      = "waiting"      // attempted forward rows are still running
	SagaCompensating = "compensating" // a compensation row is under way
	SagaHalted       = "halted"       // a compensation ended compensation_failed: a human must act
	SagaDone         = "done"         // nothing left to compensate
)

// The alert of a compensation_failed row is an outbox row of its own, of
// tool AlertTool in run AlertRun.
const (
	AlertTool = "drainer.compensation_failed"
	AlertRun  = "drainer:alerts"
)

// Values of drainer_dispatch_total's outcome label (docs/reference.md §7).
const (
	OutcomeSuccess     = "success"
	OutcomeReplay      = "replay"
	OutcomeRetry       = "retry"
	OutcomeTerminal    = "terminal"
	OutcomeAmbiguous   = "ambiguous"
	OutcomeAuth        = "auth"
	OutcomeBreakerOpen = "breaker_open"
	OutcomeUnrouted    = "unrouted"
)

// DispatchOutcomes lists the outcome label values.
var DispatchOutcomes = []string{OutcomeSuccess, OutcomeReplay, OutcomeRetry, OutcomeTerminal,
	OutcomeAmbiguous, OutcomeAuth, OutcomeBreakerOpen, OutcomeUnrouted}

// Values of drainer_compensations_total's outcome label.
const (
	CompensationSucceeded = "succeeded"
	CompensationRetry     = "retry"
	CompensationFailed    = "failed"
)

// CompensationOutcomes lists the compensation outcome label values.
var CompensationOutcomes = []string{CompensationSucceeded, CompensationRetry, CompensationFailed}

// Why a row claimed by the engine was handed back without being sent; none
// consumes an attempt.
const (
	RefusedUnrouted    = "unrouted"     // no route for its tool_name
	RefusedPaused      = "paused"       // its route or adapter is paused
	RefusedBreakerOpen = "breaker_open" // its adapter's circuit breaker is open
	RefusedSaturated   = "saturated"    // its adapter is at max_concurrency
	RefusedRateLimited = "rate_limited" // its adapter is at its rate_limit
	RefusedAuthHold    = "auth_hold"    // its adapter's credentials were refused
)
