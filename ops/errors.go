package ops

import (
	"errors"
	"fmt"
	"github.com/drainer-io/drainer/outbox"
	"time"
)

// TransitionError is a refused action on one row: the row is in a status
// from which the action is unsafe or meaningless (or the daemon moved it
// while the action ran).
type TransitionError struct {
	Key    string        `json:"key"`
	Status outbox.Status `json:"status"` // the row's current status
	Action string        `json:"action"` // requeue, cancel, resolve
	Why    string        `json:"why"`
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("cannot %s %s: it is %s (%s)", e.Action, e.Key, e.Status, e.Why)
}

// NotFoundError names something an action was asked about that does not
// exist: "row with key idem_v1_…", "row with agent_run_id r1".
type NotFoundError struct {
	What string
}

func (e *NotFoundError) Error() string { return "no " + e.What }

// PauseError is a pause of something already paused or a resume of
// something not paused.
type PauseError struct {
	Target, Name string
	Paused       bool       // whether it is paused now
	Since        *time.Time // when it was paused, if it is
	By, Reason   string
}

func (e *PauseError) Error() string {
	if !e.Paused {
		return fmt.Sprintf("%s %s is not paused", e.Target, e.Name)
	}
	msg := fmt.Sprintf("%s %s is already paused (since %s by %s", e.Target, e.Name, e.Since.UTC().Format(time.RFC3339), e.By)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg + ")"
}

// Errors of resolve's arguments, which depend on the row's status: callers
// treat them as usage errors.
var (
	ErrOutcomeRequired   = errors.New("--outcome succeeded|failed is required for an outcome_unknown row")
	ErrOutcomeNotAllowed = errors.New("--outcome does not apply to a compensation_failed row: resolving it records that a human undid the effect")
)

// raced is the refusal of a row whose status changed between the read and
// the conditional update.
func raced(key, action string, status outbox.Status) *TransitionError {
	if status == "" {
		return &TransitionError{Key: key, Status: "gone", Action: action, Why: "it was pruned while this command ran"}
	}
	return &TransitionError{Key: key, Status: status, Action: action,
		Why: "its status changed while this command ran; nothing was overwritten"}
}
