package outbox

import (
	"slices"
	"strings"
)

// This file is the one place where Go spells drainer's vocabularies: row
// statuses, kinds, saga states, the outcome label values and the reasons a
// claimed row is handed back. Everything else names the constants (SQL text
// built in Go through their SQL form), and a test of the repository keeps it
// so (docs/reference.md §2, §6, §7).

// Status is the status of an outbox row (docs/reference.md §2).
type Status string

// Row statuses.
const (
	StatusPending            Status = "pending"
	StatusInFlight           Status = "in_flight"
	StatusSucceeded          Status = "succeeded"
	StatusFailed             Status = "failed"
	StatusOutcomeUnknown     Status = "outcome_unknown"
	StatusCompensated        Status = "compensated"
	StatusCompensationFailed Status = "compensation_failed"
	StatusCancelled          Status = "cancelled"
)

// Statuses lists every status, in life-cycle order.
var Statuses = []Status{
	StatusPending, StatusInFlight, StatusSucceeded, StatusFailed,
	StatusOutcomeUnknown, StatusCompensated, StatusCompensationFailed, StatusCancelled,
}

// Terminal reports whether a row of status s never changes again by itself.
func (s Status) Terminal() bool {
	switch s {
	case StatusSucceeded, StatusFailed, StatusCompensated, StatusCancelled:
		return true
	}
	return false
}

// Parked reports whether a row of status s waits for a human (drainer resolve).
func (s Status) Parked() bool {
	return s == StatusOutcomeUnknown || s == StatusCompensationFailed
}

// Valid reports whether s is one of the eight statuses.
func (s Status) Valid() bool { return slices.Contains(Statuses, s) }

// SQL returns s as a SQL string literal.
func (s Status) SQL() string { return sqlLiteral(string(s)) }

// StatusStrings returns statuses as plain strings, e.g. for a text[] parameter.
func StatusStrings(statuses ...Status) []string {
	out := make([]string, len(statuses))
	for i, s := range statuses {
		out[i] = string(s)
	}
	return out
}

// Kind is the kind of an outbox row (queue.kind).
type Kind string

// Row kinds.
const (
	KindForward      Kind = "forward"
	KindCompensation Kind = "compensation"
)

// KindSQL returns k as a SQL string literal.
func KindSQL(k Kind) string { return sqlLiteral(string(k)) }

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

// SagaState is the state of a run's saga (runs.saga_state), or what one
// step of advancing it answered.
type SagaState string

// Saga states, as runs.saga_state holds them.
const (
	SagaWaiting      SagaState = "waiting"      // attempted forward rows are still running
	SagaCompensating SagaState = "compensating" // a compensation row is under way
	SagaHalted       SagaState = "halted"       // a compensation ended compensation_failed: a human must act
	SagaDone         SagaState = "done"         // nothing left to compensate
)

// What a step of advancing a saga answers besides the state it left.
const (
	SagaBusy       SagaState = "busy"  // another replica was advancing the run
	SagaNotAborted SagaState = "none"  // the run is not aborted: nothing to do
	SagaError      SagaState = "error" // the step failed in the database
)

// SQL returns s as a SQL string literal.
func (s SagaState) SQL() string { return sqlLiteral(string(s)) }

// The alert of a compensation_failed row is an outbox row of its own, of
// tool AlertTool in run AlertRun.
const (
	AlertTool = "drainer.compensation_failed"
	AlertRun  = "drainer:alerts"
)

// Outcome is a value of drainer_dispatch_total's outcome label
// (docs/reference.md §7).
type Outcome string

// Dispatch outcomes.
const (
	OutcomeSuccess     Outcome = "success"
	OutcomeReplay      Outcome = "replay"
	OutcomeRetry       Outcome = "retry"
	OutcomeTerminal    Outcome = "terminal"
	OutcomeAmbiguous   Outcome = "ambiguous"
	OutcomeAuth        Outcome = "auth"
	OutcomeBreakerOpen Outcome = "breaker_open"
	OutcomeUnrouted    Outcome = "unrouted"
)

// DispatchOutcomes lists the outcome label values.
var DispatchOutcomes = []Outcome{OutcomeSuccess, OutcomeReplay, OutcomeRetry, OutcomeTerminal,
	OutcomeAmbiguous, OutcomeAuth, OutcomeBreakerOpen, OutcomeUnrouted}

// CompensationOutcome is a value of drainer_compensations_total's outcome label.
type CompensationOutcome string

// Compensation outcomes.
const (
	CompensationSucceeded CompensationOutcome = "succeeded"
	CompensationRetry     CompensationOutcome = "retry"
	CompensationFailed    CompensationOutcome = "failed"
)

// CompensationOutcomes lists the compensation outcome label values.
var CompensationOutcomes = []CompensationOutcome{CompensationSucceeded, CompensationRetry, CompensationFailed}

// Refusal is why a row claimed by the engine was handed back without being
// sent; none consumes an attempt.
type Refusal string

// Refusal reasons.
const (
	RefusedUnrouted    Refusal = "unrouted"     // no route for its tool_name
	RefusedPaused      Refusal = "paused"       // its route or adapter is paused
	RefusedBreakerOpen Refusal = "breaker_open" // its adapter's circuit breaker is open
	RefusedSaturated   Refusal = "saturated"    // its adapter is at max_concurrency
	RefusedRateLimited Refusal = "rate_limited" // its adapter is at its rate_limit
	RefusedAuthHold    Refusal = "auth_hold"    // its adapter's credentials were refused
)

// sqlLiteral quotes a vocabulary word as a SQL string literal (the words
// hold no quote; doubling one keeps it right all the same).
func sqlLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
