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

	// waitsFor names why a row handed back unsent waits (outbox.OutcomeUnrouted,
	// outbox.RefusedPaused): once written, the completer wakes it again if
	// that no longer holds (see completer.rewake).
	waitsFor outbox.Refusal
	// wakeWhenDue: a row its adapter's gate handed back unsent, due when
	// the gate may let it through (a slot, a rate token, the breaker's next
	// probe, an auth hold's recheck), or a row whose credentials the
	// provider refused, due at the hold's recheck: its attempt is given
	// back, yet its due time wakes every replica (retryWakes), as for a
	// gate's refusal, since another replica's credentials may not be held.
	wakeWhenDue bool

	// For metrics, logs and the detect probe's witness only.
	adapter string
	outcome outbox.Outcome
	row     *claimedRow
	route   *Route
}

// newCompletion starts the completion of row.
func newCompletion(row *claimedRow, status outbox.Status) completion {
	return completion{Completion: store.Completion{Seq: row.Seq, Token: row.LeaseToken, Attempts: row.Attempts, Status: status, Gen: row.Gen,
		Uncounted: !row.Counted}, row: row}
}

// decision inputs that do not come from the row or result.
type decideEnv struct {
	rand *rand.Rand
	now  time.Time // database clock at claim
	// authHold is how long the route (or its whole adapter) is held back
	// after the provider refused the credentials: an auth answer waits at
	// least that long.
	authHold time.Duration
}

func strPtr(s string) *string { return &s }

// failStatus is the terminal failure status of a row: compensation rows that
// cannot succeed halt their saga as compensation_failed.
func failStatus(row *claimedRow) outbox.Status {
	if row.Kind == outbox.KindCompensation {
		return outbox.StatusCompensationFailed
	}
	return outbox.StatusFailed
}

// decide maps one attempt's classified result to the row's next state
// (docs/reference.md §2 attempts table, §4 Full Jitter, §5 classes).
func decide(env decideEnv, row *claimedRow, route *Route, adapter string, res dispatch.Result) completion {
	c := newCompletion(row, "")
	c.adapter, c.ResponseStatus, c.problem = adapter, res.Status, res.Problem
	if res.RetryAfter > 0 && !res.NotSent && route != nil {
		// The provider's push-back on this tool holds its reclaimed rows too.
		c.Tool, c.RetryAfter = row.ToolName, min(res.RetryAfter, route.Backoff.MaxRetryAfter)
	}
	if res.Outcome == dispatch.OutcomeUnknownZero {
		res.Outcome = dispatch.Ambiguous
		if res.Err == nil {
			res.Err = errors.New("adapter returned no outcome")
		}
	}
	c.outcome = outbox.Outcome(res.Outcome.String())
	c.Record = res.Record
	switch res.Outcome {
	case dispatch.Success, dispatch.Replay:
		c.Status, c.Response, c.KeepNext = outbox.StatusSucceeded, res.Response, true
		if len(c.Response) == 0 {
			c.Response = json.RawMessage("null")
		}
	case dispatch.Terminal:
		c.Status, c.LastError, c.KeepNext = failStatus(row), errText(res, "terminal"), true
		if res.NotSent && res.Reason == dispatch.ReasonUnsendable {
			// The row cannot be sent as it stands: nothing left this process,
			// so the attempt counted at claim is given back.
			c.GiveBack, c.NoRequest, c.Note = true, true, noteUnsendable
			c.LastError = errText(res, "failed before dispatch")
		}
	case dispatch.Auth:
		// A broken credential is the adapter's fault, not the row's.
		c.Status, c.GiveBack, c.Floor, c.wakeWhenDue = outbox.StatusPending, true, true, true
		c.Delay = max(route.Backoff.Delay(env.rand, max(row.Attempts-1, 1), res.RetryAfter), env.authHold)
		c.LastError = errText(res, "authentication refused by the provider (no attempt consumed)")
	default:
		decideRetry(env, &c, row, route, res)
	}
	if !c.NoRequest && c.Status != outbox.StatusSucceeded && res.Reason != "" {
		// A request went out and did not succeed: its audit entry says why
		// in the result's fixed vocabulary ("sent: timeout"), which stays
		// when last_error is cleared or replaced.
		c.Note = noteSentPrefix + res.Reason
	}
	return c
}

// decideRetry decides a retryable or ambiguous attempt: parked once it
// may have been sent when its answer could not be read (Result.Unread) or
// on a non_idempotent route (not when the provider refused it:
// Result.Refused), given back when it was not sent, failed
// when out of attempts (parked instead when the provider's last answer
// said the key was still in flight there), else rescheduled with Full
// Jitter floored by the provider's Retry-After.
func decideRetry(env decideEnv, c *completion, row *claimedRow, route *Route, res dispatch.Result) {
	maybeSent := !res.NotSent && !res.Refused
	if res.Outcome == dispatch.Ambiguous || (maybeSent && route.NonIdempotent()) {
		c.outcome = outbox.OutcomeAmbiguous
	}
	switch {
	case res.Unread && maybeSent:
		c.outcome = outbox.OutcomeAmbiguous
		c.Status, c.KeepNext = outbox.StatusOutcomeUnknown, true
		c.LastError = errText(res, "outcome unknown: the provider answered, but its answer was too large to read; it may have acted, and sending again would get the same answer or act twice; check with the provider, then `drainer resolve`")
	case maybeSent && route.NonIdempotent():
		c.Status, c.KeepNext = outbox.StatusOutcomeUnknown, true
		c.LastError = errText(res, "outcome unknown: the request may have reached the provider and the route is non_idempotent; resolve with `drainer resolve`")
	case res.NotSent && !(res.AwaitsFix && row.Kind == outbox.KindCompensation):
		// Nothing left: the attempt is given back. A compensation whose
		// destination is missing counts it instead (Result.AwaitsFix), and
		// ends compensation_failed at its route's max_attempts.
		c.Status, c.GiveBack, c.Floor = outbox.StatusPending, true, true
		c.NoRequest, c.Note = true, noteNotSent
		c.Delay = route.Backoff.Delay(env.rand, max(row.Attempts-1, 1), res.RetryAfter)
		c.LastError = errText(res, "not sent")
	case row.Attempts >= route.MaxAttempts && res.Reason == dispatch.ReasonInFlightUpstream && maybeSent && row.Kind == outbox.KindForward:
		// The provider's last word was that the key's first request is
		// still being processed (or that its outcome is unknown): its
		// effect may exist, so the row cannot end failed, which would tell
		// the saga there is nothing to undo. It parks for a human.
		c.outcome = outbox.OutcomeAmbiguous
		c.Status, c.KeepNext = outbox.StatusOutcomeUnknown, true
		c.LastError = errText(res, fmt.Sprintf("outcome unknown: attempts exhausted (%d of %d) while the provider still answered that this key's first request is in flight or its outcome unknown; its effect may exist; check at the provider, then `drainer resolve`",
			row.Attempts, route.MaxAttempts))
	case row.Attempts >= route.MaxAttempts:
		// The last answer's Retry-After (or backoff) stays the row's floor:
		// an operator's requeue of the failed row must not send it earlier.
		c.Status, c.Floor = failStatus(row), true
		c.Delay = route.Backoff.Delay(env.rand, row.Attempts, res.RetryAfter)
		c.LastError = errText(res, fmt.Sprintf("attempts exhausted (%d of %d)", row.Attempts, route.MaxAttempts))
	case errors.Is(res.Err, errCutOff):
		// Shutdown cut the call off: the next replica may retry at once.
		c.Status, c.Delay = outbox.StatusPending, 0
		c.LastError = errText(res, fmt.Sprintf("attempt %d of %d", row.Attempts, route.MaxAttempts))
	default:
		c.Status, c.Floor = outbox.StatusPending, true
		c.Delay = route.Backoff.Delay(env.rand, row.Attempts, res.RetryAfter)
		c.LastError = errText(res, fmt.Sprintf("attempt %d of %d", row.Attempts, route.MaxAttempts))
	}
	if res.NotSent && !c.GiveBack {
		// Nothing reached the provider, yet the attempt counts (a
		// compensation whose destination is missing): its audit entry
		// records no answer.
		c.NoRequest, c.Note = true, noteNotSentCounted
	}
}

// errText is a last_error: prefix, then the answer's error or reason.
func errText(res dispatch.Result, prefix string) *string {
	msg := prefix
	if res.Err != nil {
		msg = prefix + ": " + res.Err.Error()
	} else if res.Reason != "" {
		msg = prefix + ": " + res.Reason
	}
	return &msg
}

// errCutOff marks a call cancelled by shutdown after it may have been sent.
var errCutOff = errors.New("call cut off by shutdown")

// Audit notes of completions without a request (store.Completion.Note):
// the reason on the entry, which records no answer.
const (
	noteNotSent = "not sent: the request did not leave (no answer)"
	// A compensation's attempt that counts though nothing was sent
	// (dispatch.Result.AwaitsFix).
	noteNotSentCounted = "not sent: its destination is missing; the attempt counts (a compensation is bounded by max_attempts)"
	noteShutdown       = "released at shutdown before it was sent; no request sent"
	noteUnrouted       = "deferred: no route for its tool_name; no request sent"
	noteRouteLoaded    = "handed back: its route was loaded after the claim; no request sent"
	noteNoAdapter      = "deferred: its route's adapter is not loaded; no request sent"
	notePaused         = "deferred: paused by an operator; no request sent"
	noteExhausted      = "failed before dispatch: attempts exhausted; no request sent"
	noteKeyTTL         = "failed before dispatch: key TTL guard; no request sent"
	noteUnsendable     = "failed before dispatch: the payload cannot build the route's request; no request sent"
	noteRunAborted     = "cancelled before dispatch: its run was aborted; no request sent"
	noteRefusedFmt     = "%s; no request sent"
	// The reason on the entry of an attempt sent that did not succeed,
	// before its dispatch.Result.Reason.
	noteSentPrefix = "sent: "
)

// refusalNote names, per gate refusal, what happened to the row.
var refusalNote = map[outbox.Refusal]string{
	outbox.RefusedBreakerOpen: "deferred: circuit breaker open",
	outbox.RefusedSaturated:   "deferred: adapter at max_concurrency",
	outbox.RefusedRateLimited: "deferred: adapter at its rate_limit",
	outbox.RefusedAuthHold:    "held: the provider refused the credentials (auth hold)",
}

// release gives a claimed row back without a consumed attempt; no request
// was sent (note says why, for the audit).
func release(row *claimedRow, delay time.Duration, keepNext bool, msg *string, outcome outbox.Outcome, note string) completion {
	c := newCompletion(row, outbox.StatusPending)
	c.GiveBack, c.Delay, c.KeepNext, c.LastError, c.outcome = true, delay, keepNext, msg, outcome
	c.NoRequest, c.Note = true, note
	return c
}

// releaseUnsent gives a row back untouched at shutdown: nothing was sent.
func releaseUnsent(row *claimedRow) completion {
	return release(row, 0, true, nil, "", noteShutdown)
}

// failNow ends a claimed row without dispatching it; the attempt counted at
// claim is given back since nothing was sent.
func failNow(row *claimedRow, msg, note string) completion {
	c := newCompletion(row, failStatus(row))
	c.GiveBack, c.KeepNext, c.LastError, c.outcome = true, true, &msg, outbox.OutcomeTerminal
	c.NoRequest, c.Note = true, note
	return c
}
