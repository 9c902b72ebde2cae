package natsjs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/drainer-io/drainer/dispatch"
)

// Reasons of this adapter's results, besides dispatch.ReasonConnect,
// ReasonTimeout, ReasonCancelled, ReasonReplay and ReasonPayloadMismatch.
const (
	ReasonStored         = "stored"          // the stream stored the message
	ReasonNoStream       = "no_stream"       // no stream captures the subject (no responders)
	ReasonStreamConfig   = "stream_config"   // another stream than the expected one, a sealed stream, JetStream disabled
	ReasonTooLarge       = "too_large"       // above max_payload or the stream's max_msg_size
	ReasonUnavailable    = "js_unavailable"  // JetStream answered 5xx: storage failure, no leader, ...
	ReasonInFlight       = "in_flight"       // the same message id is being stored by another attempt
	ReasonStreamFull     = "stream_full"     // the stream is at its limits and discards new messages
	ReasonRejected       = "rejected"        // JetStream refused the message for good
	ReasonInvalidSubject = "invalid_subject" // the tool name cannot be a subject token
	ReasonInvalidAck     = "invalid_ack"     // an acknowledgement that could not be read
)

// JetStream error codes this adapter tells apart (nats-server
// server/errors.json).
const (
	errCodeStreamNotMatch     = 10060 // Nats-Expected-Stream differs
	errCodeStreamSealed       = 10109
	errCodeHeaderTooLarge     = 10097
	errCodeDuplicateInProcess = 10158
	errCodeStoreFailed        = 10077 // storing failed: a stream's limits, or storage
)

// classify maps a publish error to a result. ctx is the attempt's context;
// the publish was started with it only after ctx.Err() was nil, so a
// context error means the request may have been written.
func classify(ctx context.Context, err error) dispatch.Result {
	if apiErr, ok := errors.AsType[*jetstream.APIError](err); ok {
		r := classifyAPIError(apiErr)
		// JetStream answered: it did not store this message. A refusal
		// that waits for an operator's fix (the stream's configuration) or
		// for another attempt of the same message costs no attempt; any
		// other counts, so a stream that refuses every time (full, with
		// discard new) fails the row at its route's max_attempts.
		if r.Reason == ReasonStreamConfig || r.Reason == ReasonInFlight {
			r.NotSent, r.AwaitsFix = true, r.Reason == ReasonStreamConfig
		} else {
			r.Refused, r.Down = true, r.Reason == ReasonUnavailable
		}
		r.Err = fmt.Errorf("jetstream refused the message: %s (code %d, error %d)", apiErr.Description, apiErr.Code, apiErr.ErrorCode)
		return r
	}
	notSent := func(outcome dispatch.Outcome, reason, what string) dispatch.Result {
		return dispatch.Result{Outcome: outcome, NotSent: true, Reason: reason, Err: fmt.Errorf("%s: %w", what, err)}
	}
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		r := notSent(dispatch.Retry, ReasonNoStream, "no stream captures the subject")
		r.AwaitsFix = true
		return r
	case errors.Is(err, nats.ErrMaxPayload):
		return notSent(dispatch.Terminal, ReasonTooLarge, "message not sent")
	case errors.Is(err, nats.ErrBadSubject):
		return notSent(dispatch.Terminal, ReasonInvalidSubject, "message not sent")
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionDraining),
		errors.Is(err, nats.ErrReconnectBufExceeded), errors.Is(err, nats.ErrInvalidConnection),
		errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionReconnecting):
		return notSent(dispatch.Retry, dispatch.ReasonConnect, "not connected, message not sent")
	case errors.Is(err, nats.ErrHeadersNotSupported):
		r := notSent(dispatch.Retry, ReasonStreamConfig, "message not sent")
		r.AwaitsFix = true
		return r
	}
	r := dispatch.Result{Outcome: dispatch.Ambiguous}
	switch {
	case errors.Is(ctx.Err(), context.Canceled) || errors.Is(err, context.Canceled):
		r.Reason = dispatch.ReasonCancelled
		r.Err = fmt.Errorf("cancelled while waiting for the acknowledgement: %w", context.Canceled)
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		r.Reason = dispatch.ReasonTimeout
		r.Err = fmt.Errorf("no acknowledgement in time, the message may be stored: %w", context.DeadlineExceeded)
	case errors.Is(err, jetstream.ErrInvalidJSAck):
		r.Reason = ReasonInvalidAck
		r.Err = fmt.Errorf("unreadable acknowledgement, the message may be stored: %w", err)
	default:
		r.Reason = dispatch.ReasonConnection
		r.Err = fmt.Errorf("publish failed, the message may be stored: %w", err)
	}
	return r
}

// classifyAPIError classifies an error acknowledgement.
func classifyAPIError(e *jetstream.APIError) dispatch.Result {
	switch {
	case e.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum, e.ErrorCode == errCodeHeaderTooLarge:
		return dispatch.Result{Outcome: dispatch.Terminal, Reason: ReasonTooLarge}
	case e.ErrorCode == errCodeStreamNotMatch, e.ErrorCode == errCodeStreamSealed,
		e.ErrorCode == jetstream.JSErrCodeJetStreamNotEnabled, e.ErrorCode == jetstream.JSErrCodeJetStreamNotEnabledForAccount:
		return dispatch.Result{Outcome: dispatch.Retry, Reason: ReasonStreamConfig}
	case e.ErrorCode == errCodeDuplicateInProcess:
		return dispatch.Result{Outcome: dispatch.Retry, Reason: ReasonInFlight}
	case e.ErrorCode == errCodeStoreFailed && strings.HasPrefix(e.Description, "maximum "):
		// A stream at its limits with discard new ("maximum messages
		// exceeded", bytes, per subject): this stream refuses, JetStream
		// is up (its 503 says nothing of the server).
		return dispatch.Result{Outcome: dispatch.Retry, Reason: ReasonStreamFull}
	case e.Code >= 500:
		return dispatch.Result{Outcome: dispatch.Retry, Reason: ReasonUnavailable}
	default:
		return dispatch.Result{Outcome: dispatch.Terminal, Reason: ReasonRejected}
	}
}
