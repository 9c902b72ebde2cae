package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/drainer-io/drainer/dispatch"
)

// Reasons of this adapter's results, besides dispatch.ReasonConnect,
// ReasonConnection, ReasonTimeout, ReasonCancelled, ReasonAuth,
// ReasonReplay, ReasonPayloadMismatch and ReasonNotReady.
const (
	ReasonAcknowledged = "acknowledged"  // the record is written (acks=all)
	ReasonInvalidTopic = "invalid_topic" // the row's topic is not a valid topic name
	ReasonUnknownTopic = "unknown_topic" // the topic does not exist
	ReasonTooLarge     = "too_large"     // the record exceeds the broker's or topic's limit
	ReasonRejected     = "rejected"      // the broker refused the record for good
	ReasonBroker       = "broker_error"  // the broker refused the record for now
	ReasonInFlight     = "in_flight"     // the same key is being produced by another attempt
	ReasonClosed       = "closed"        // the adapter is closing
)

// authErrors are the broker answers that refuse the client's identity or
// permissions: the adapter is misconfigured, not the row.
var authErrors = []*kerr.Error{
	kerr.TopicAuthorizationFailed,
	kerr.ClusterAuthorizationFailed,
	kerr.TransactionalIDAuthorizationFailed,
	kerr.SaslAuthenticationFailed,
	kerr.IllegalSaslState,
	kerr.UnsupportedSaslMechanism,
	kerr.DelegationTokenAuthorizationFailed,
}

// terminalErrors are the broker answers that refuse the record itself.
var terminalErrors = map[*kerr.Error]string{
	kerr.MessageTooLarge:             ReasonTooLarge,
	kerr.RecordListTooLarge:          ReasonTooLarge,
	kerr.InvalidTopicException:       ReasonInvalidTopic,
	kerr.InvalidRecord:               ReasonRejected,
	kerr.PolicyViolation:             ReasonRejected,
	kerr.CorruptMessage:              ReasonRejected,
	kerr.InvalidTimestamp:            ReasonRejected,
	kerr.UnsupportedForMessageFormat: ReasonRejected,
}

// appliedMaybe are the retriable answers a broker may give after it wrote
// the record.
var appliedMaybe = []*kerr.Error{kerr.RequestTimedOut, kerr.NotEnoughReplicasAfterAppend}

// classify maps the error a produce promise reported for a record bound
// for topic to a result. The broker's error code is named in the message,
// with its meaning.
func classify(err error, topic string) dispatch.Result {
	where := ""
	if topic != "" {
		where = " (topic " + topic + ")"
	}
	if ke, ok := errors.AsType[*kerr.Error](err); ok {
		brokerSaid := fmt.Errorf("broker answered %s%s: %s", ke.Message, where, ke.Description)
		for _, a := range authErrors {
			if ke == a {
				return dispatch.Result{Outcome: dispatch.Auth, NotSent: true, Reason: dispatch.ReasonAuth, Err: brokerSaid}
			}
		}
		if reason, ok := terminalErrors[ke]; ok {
			return dispatch.Result{Outcome: dispatch.Terminal, Refused: true, Reason: reason, Err: brokerSaid}
		}
		switch {
		case ke == kerr.UnknownTopicOrPartition || ke == kerr.UnknownTopicID:
			return dispatch.Result{Outcome: dispatch.Retry, NotSent: true, AwaitsFix: true, Reason: ReasonUnknownTopic,
				Err: fmt.Errorf("topic %s does not exist and the brokers do not create it: create it, or fix the adapter's topic (broker answered %s)", topic, ke.Message)}
		case isOneOf(ke, appliedMaybe):
			return dispatch.Result{Outcome: dispatch.Ambiguous, Reason: ReasonBroker, Err: fmt.Errorf("%w; the record may be written", brokerSaid)}
		}
		// Retriable or not, a code this adapter does not know is retried:
		// never dropped on an answer nobody has looked at. The broker
		// answered, so the attempt counts: a broker that refuses every
		// time fails the row at its route's max_attempts. Kafka's retriable
		// codes are the cluster's own state (no leader, not enough
		// replicas, a timeout): they count toward the breaker (Down).
		return dispatch.Result{Outcome: dispatch.Retry, Refused: true, Down: true, Reason: ReasonBroker, Err: brokerSaid}
	}
	switch {
	case errors.Is(err, context.Canceled):
		return dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Reason: dispatch.ReasonCancelled, Err: fmt.Errorf("not sent: %w", err)}
	case errors.Is(err, context.DeadlineExceeded):
		return dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Reason: dispatch.ReasonTimeout,
			Err: fmt.Errorf("not sent%s before the attempt's deadline: %w", where, err)}
	case errors.Is(err, kgo.ErrRecordTimeout):
		return dispatch.Result{Outcome: dispatch.Ambiguous, Reason: dispatch.ReasonTimeout,
			Err: fmt.Errorf("no acknowledgement%s in time, the record may be written: %w", where, err)}
	case errors.Is(err, kgo.ErrRecordRetries):
		return dispatch.Result{Outcome: dispatch.Ambiguous, Reason: ReasonBroker,
			Err: fmt.Errorf("the brokers kept failing%s, the record may be written: %w", where, err)}
	case errors.Is(err, kgo.ErrMaxBuffered):
		return dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Reason: dispatch.ReasonConnect, Err: fmt.Errorf("not sent: %w", err)}
	case errors.Is(err, kgo.ErrClientClosed):
		return dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Reason: ReasonClosed, Err: fmt.Errorf("not sent: %w", err)}
	case err.Error() == errPurgedText:
		// Buffered for a topic the adapter purged from the client (deleted
		// and created again: every record to the old id was refused).
		return dispatch.Result{Outcome: dispatch.Retry, NotSent: true, AwaitsFix: true, Reason: ReasonUnknownTopic,
			Err: fmt.Errorf("not sent%s: the topic was deleted and created again, and is being learnt anew: %w", where, err)}
	}
	if tlsRefusal(err) {
		return dispatch.Result{Outcome: dispatch.Auth, NotSent: true, Reason: dispatch.ReasonAuth,
			Err: fmt.Errorf("not sent%s, TLS refused: %w", where, err)}
	}
	if op, ok := errors.AsType[*net.OpError](err); ok && op.Op == "dial" {
		return dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Reason: dispatch.ReasonConnect,
			Err: fmt.Errorf("not sent%s, no broker reachable: %w", where, err)}
	}
	return dispatch.Result{Outcome: dispatch.Ambiguous, Reason: dispatch.ReasonConnection,
		Err: fmt.Errorf("produce failed%s, the record may be written: %w", where, err)}
}

// errPurgedText is the error the client fails a record with when its
// topic is purged while the record is buffered (kgo's errPurged, not
// exported).
const errPurgedText = "topic purged while buffered"

func isOneOf(e *kerr.Error, list []*kerr.Error) bool {
	for _, l := range list {
		if e == l {
			return true
		}
	}
	return false
}
