package drainer

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
)

// claimedRow is one row leased to this replica.
type claimedRow = store.ClaimedRow

// completion is the next state of one leased row, written back by the
// completer only while the row's lease token still matches (fencing).
type completion struct {
	store.Completion
	// problem is the answer's RFC 9457 problem (stored as JSON by sanitize).
	problem *dispatch.Problem

	// For metrics, logs and the detect probe's witness only.
	adapter string
	outcome string
	row     *claimedRow
	route   *Route
}

// newCompletion starts the completion of row.
func newCompletion(row *claimedRow, status string) completion {
	return completion{Completion: store.Completion{Seq: row.Seq, Token: row.LeaseToken, Status: status}, row: row}
}

// decision inputs that do not come from the row or result.
type decideEnv struct {
	rand *rand.Rand
	now  time.Time // database clock at claim
	// authHold is how long the adapter is held back after refusing its
	// credentials: an auth answer waits at least that long.
	authHold time.Duration
}

func strPtr(s string) *string { return &s }

// failStatus is the terminal failure status of a row: compensation rows that
// cannot succeed halt their saga as compensation_failed.
func failStatus(row *claimedRow) string {
	if row.Kind == outbox.KindCompensation {
		return outbox.StatusCompensationFailed
	}
	return outbox.StatusFailed
}

// decide maps one attempt's classified result to the row's next state
// (CONTRACT §2 attempts table, §4 Full Jitter, §5 classes).
func decide(env decideEnv, row *claimedRow, route *Route, adapter string, res dispatch.Result) completion {
	c := newCompletion(row, "")
	c.adapter, c.ResponseStatus = adapter, res.Status
	errText := func(prefix string) *string {
		msg := prefix
		if res.Err != nil {
			msg = prefix + ": " + res.Err.Error()
		} else if res.Reason != "" {
			msg = prefix + ": " + res.Reason
		}
		return &msg
	}
	c.problem = res.Problem
	outcome := res.Outcome
	if outcome == dispatch.OutcomeUnknownZero {
		outcome = dispatch.Ambiguous
		if res.Err == nil {
			res.Err = errors.New("adapter returned no outcome")
		}
	}
	c.outcome = outcome.String()

	switch outcome {
	case dispatch.Success, dispatch.Replay:
		c.Status = outbox.StatusSucceeded
		c.Response = res.Response
		if len(c.Response) == 0 {
			c.Response = json.RawMessage("null")
		}
		c.KeepNext = true
		return c

	case dispatch.Terminal:
		c.Status = failStatus(row)
		c.LastError = errText("terminal")
		c.KeepNext = true
		return c

	case dispatch.Auth:
		// A broken credential is the adapter's fault, not the row's.
		c.Status = outbox.StatusPending
		c.GiveBack = true
		c.Delay = max(route.Backoff.Delay(env.rand, max(row.Attempts-1, 1), res.RetryAfter), env.authHold)
		c.Floor = true
		c.LastError = errText("authentication refused by the provider (no attempt consumed)")
		return c
	}

	// Retry or Ambiguous.
	maybeSent := !res.NotSent
	if maybeSent && route.NonIdempotent() {
		c.Status = outbox.StatusOutcomeUnknown
		c.outcome = outbox.OutcomeAmbiguous
		c.LastError = errText("outcome unknown: the request may have reached the provider and the route is non_idempotent; resolve with `drainer resolve`")
		c.KeepNext = true
		return c
	}
	if outcome == dispatch.Ambiguous {
		c.outcome = outbox.OutcomeAmbiguous
	}
	if !maybeSent {
		c.Status = outbox.StatusPending
		c.GiveBack = true
		c.Delay = route.Backoff.Delay(env.rand, max(row.Attempts-1, 1), res.RetryAfter)
		c.Floor = true
		c.LastError = errText("not sent")
		return c
	}
	if row.Attempts >= route.MaxAttempts {
		c.Status = failStatus(row)
		c.LastError = errText(fmt.Sprintf("attempts exhausted (%d of %d)", row.Attempts, route.MaxAttempts))
		c.KeepNext = true
		return c
	}
	c.Status = outbox.StatusPending
	if errors.Is(res.Err, errCutOff) {
		c.Delay = 0 // shutdown cut the call off: the next replica may retry at once
	} else {
		c.Delay = route.Backoff.Delay(env.rand, row.Attempts, res.RetryAfter)
		c.Floor = true
	}
	c.LastError = errText(fmt.Sprintf("attempt %d of %d", row.Attempts, route.MaxAttempts))
	return c
}

// errCutOff marks a call cancelled by shutdown after it may have been sent.
var errCutOff = errors.New("call cut off by shutdown")

// release gives a claimed row back without a consumed attempt.
func release(row *claimedRow, delay time.Duration, keepNext bool, msg *string, outcome string) completion {
	c := newCompletion(row, outbox.StatusPending)
	c.GiveBack, c.Delay, c.KeepNext, c.LastError, c.outcome = true, delay, keepNext, msg, outcome
	return c
}

// failNow ends a claimed row without dispatching it; the attempt counted at
// claim is given back since nothing was sent.
func failNow(row *claimedRow, msg string) completion {
	c := newCompletion(row, failStatus(row))
	c.GiveBack, c.KeepNext, c.LastError, c.outcome = true, true, &msg, outbox.OutcomeTerminal
	return c
}
