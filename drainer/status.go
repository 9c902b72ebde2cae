package drainer

// Row statuses (CONTRACT §2).
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
