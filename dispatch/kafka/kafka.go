package kafka

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/drainer-io/drainer/dispatch"
)

// Headers set on every record (docs/reference.md §5).
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderTuple          = "X-Agent-Idempotency-Tuple"
	HeaderTraceparent    = "traceparent"
)

// produceRetries is how many times the client sends a record again within
// one attempt, after a retriable refusal, before failing it with the
// broker's last error: a leader move is absorbed; a broker that keeps
// refusing becomes the row's retry, and the engine's backoff, not a worker
// slot, does the waiting.
const produceRetries = 3

// metadataMinAge is the least time between two metadata requests.
const metadataMinAge = 250 * time.Millisecond

// retryBackoff is the client's wait before its n-th retry of a request or
// a connection: 100ms doubling, at most 1s.
func retryBackoff(n int) time.Duration {
	return min(100*time.Millisecond<<min(max(n-1, 0), 4), time.Second)
}

// Adapter produces one record per row. It is safe for concurrent use.
type Adapter struct {
	cfg   Config
	topic Topic
	cl    *kgo.Client
	// acks remembers the records acknowledged in this process, and the
	// keys being produced now.
	acks *ackLog
	// bg is the background start, waiting for a broker.
	bg dispatch.Background
	// lastDialErr is the latest failure to connect to a broker, for the
	// message of an attempt that got no acknowledgement.
	lastDialErr atomic.Pointer[string]
	// tlsRefused is true when the latest connection failed to verify the
	// broker's certificate (or the broker refused the client's).
	tlsRefused atomic.Bool
	// openConns counts the open broker connections and connects the
	// connections ever opened: an attempt that began with none open and
	// saw none opened cannot have written its record.
	openConns, connects atomic.Int64
}

var _ dispatch.Adapter = (*Adapter)(nil)

// New validates cfg (after WithDefaults), loads its TLS files and builds the
// client: an idempotent producer with acks=all. It opens no connection
// (Probe and StartInBackground do); errors never show the SASL password.
func New(cfg Config) (*Adapter, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	topic, _ := ParseTopic(cfg.Topic) // validated
	a := &Adapter{cfg: cfg, topic: topic, acks: newAckLog(ackLogSize)}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.SeedBrokers()...),
		kgo.ClientID(cfg.ClientID),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordRetries(produceRetries),
		kgo.UnknownTopicRetries(produceRetries),
		kgo.ProduceRequestTimeout(cfg.Timeout),
		// A connection whose request goes unanswered this much longer
		// than asked is cut, and its records sent again on a new one.
		kgo.RequestTimeoutOverhead(cfg.Timeout),
		kgo.ProducerLinger(0),
		// A refused produce triggers a metadata refresh before the
		// next try: allow it sooner than the client's 5s default, so
		// that a leader move costs well under an attempt's timeout.
		kgo.MetadataMinAge(metadataMinAge),
		// Reconnect and retry within a second of a broker's return (the
		// client's default backoff grows to 5s).
		kgo.RetryBackoffFn(retryBackoff),
		kgo.DisableClientMetrics(),
		kgo.WithLogger(logger{cfg.Logger}),
		kgo.WithHooks(dialHook{a}),
	}
	if cfg.TLS != nil {
		tc, err := cfg.TLS.Config()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if cfg.SASL != nil {
		opts = append(opts, kgo.SASL(mechanism(*cfg.SASL)))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	a.cl = cl
	return a, nil
}

// mechanism returns the SASL mechanism of s (validated).
func mechanism(s SASL) sasl.Mechanism {
	switch s.Mechanism {
	case MechanismSCRAMSHA256:
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism()
	case MechanismSCRAMSHA512:
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism()
	default:
		return plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism()
	}
}

// Topic returns the adapter's topic template.
func (a *Adapter) Topic() Topic { return a.topic }

// Probe asks the brokers for their metadata once, within the timeout: nil
// when a broker answered. An error wrapping dispatch.ErrUnavailable says no
// broker could be reached; any other is a refusal (SASL, TLS).
func (a *Adapter) Probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	err := a.cl.Ping(ctx)
	if err == nil {
		return nil
	}
	if r := classify(err, ""); r.Outcome == dispatch.Auth {
		return fmt.Errorf("kafka: %w", r.Err)
	}
	if a.tlsRefused.Load() {
		return fmt.Errorf("kafka: TLS refused: %w", a.describe(err))
	}
	return dispatch.MarkUnavailable(fmt.Errorf("kafka: no broker answered: %w", a.describe(err)))
}

// StartInBackground holds the adapter's rows back (Retry, NotSent, reason
// dispatch.ReasonNotReady: no attempt consumed, the breaker not counting)
// until Probe succeeds, trying again with a doubling delay up to 5s
// (dispatch.Background). Close stops it.
func (a *Adapter) StartInBackground(log *slog.Logger) {
	if log == nil {
		log = a.cfg.Logger
	}
	a.bg.Start(log, "kafka", "brokers", a.Probe)
}

// Ready reports whether the adapter is not waiting for a background start.
func (a *Adapter) Ready() bool { return !a.bg.Waiting() }

// Close stops a background start, waits (within ctx and the timeout) for
// the acknowledgements of records still in flight, and closes the client.
func (a *Adapter) Close(ctx context.Context) error {
	a.bg.Stop()
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	_ = a.cl.Flush(ctx) // what is not acknowledged by then is failed by Close
	a.cl.Close()
	return nil
}

// Dispatch produces the row as one record and waits for its
// acknowledgement: Success with {"topic", "partition", "offset"}. A row
// acknowledged earlier in this process is a Replay with the same answer,
// without a second record.
func (a *Adapter) Dispatch(ctx context.Context, m *dispatch.Message) dispatch.Result {
	topic, err := a.topic.Expand(m.Tuple.ToolName)
	if err != nil {
		return dispatch.Result{Outcome: dispatch.Terminal, NotSent: true, Reason: ReasonInvalidTopic, Err: fmt.Errorf("not sent: %w", err)}
	}
	if a.bg.Waiting() {
		return dispatch.NotReady(errors.New("kafka: no broker has been reachable since startup; connecting in the background (not sent)"))
	}
	sum := sha256.Sum256(m.Payload)
	if r, done := a.acks.begin(m.Key, sum); done {
		return r
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	if err := ctx.Err(); err != nil {
		a.acks.abandon(m.Key)
		reason := dispatch.ReasonCancelled
		if errors.Is(err, context.DeadlineExceeded) {
			reason = dispatch.ReasonTimeout
		}
		return dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Reason: reason, Err: fmt.Errorf("not sent: %w", err)}
	}
	epoch := a.connects.Load()
	unconnected := a.openConns.Load() == 0
	if r, ok := a.producerID(ctx, m.Key, topic, epoch, unconnected); !ok {
		return r
	}
	rec := a.record(topic, m)
	promised := make(chan error, 1)
	// The promise outlives this call when the attempt ends first: it
	// records the acknowledgement, so a retry of the key is a Replay.
	a.cl.Produce(ctx, rec, func(r *kgo.Record, err error) {
		if err == nil {
			a.acks.done(m.Key, sum, ack{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset})
		} else {
			a.acks.abandon(m.Key)
		}
		promised <- err
	})
	select {
	case err := <-promised:
		if err != nil {
			if errors.Is(err, kerr.UnknownTopicID) {
				// The topic was deleted and created again: the client keeps
				// the old id and never adopts the new one by itself. Purged,
				// the topic is learnt anew by the next record to it.
				a.cl.PurgeTopicsFromClient(topic)
			}
			r := classify(err, topic)
			if _, answered := errors.AsType[*kerr.Error](err); !answered {
				r.Err = a.describe(r.Err) // which broker could not be reached
			}
			return r
		}
		return dispatch.Result{Outcome: dispatch.Success, Reason: ReasonAcknowledged,
			Response: ack{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}.JSON()}
	case <-ctx.Done():
		if r, ok := a.unconnected(ctx, topic, epoch, unconnected); ok {
			return r
		}
		if errors.Is(ctx.Err(), context.Canceled) {
			return dispatch.Result{Outcome: dispatch.Ambiguous, Reason: dispatch.ReasonCancelled,
				Err: fmt.Errorf("cancelled while waiting for the acknowledgement of topic %s, the record may be written: %w", topic, context.Canceled)}
		}
		return dispatch.Result{Outcome: dispatch.Ambiguous, Reason: dispatch.ReasonTimeout,
			Err: a.describe(fmt.Errorf("no acknowledgement from topic %s within %s, the record may be written: %w", topic, a.cfg.Timeout, context.DeadlineExceeded))}
	}
}

// producerID waits for the client's producer id (kept once loaded: no
// round trip after the first), before the record is buffered. A broker that
// refuses it (cluster authorization) has answered: the attempt ends with
// that answer and no record buffered (the client fails the records
// buffered when the refusal comes, and one buffered an instant later would
// wait, unsent, until the attempt's deadline and be taken for one that may
// be written). A closed client ends it too. A load that fails otherwise is
// tried again, with the client's backoff, until the attempt's deadline:
// without a producer id no record can be sent, so an attempt that ends
// waiting for one sent nothing. ok is false when the attempt ends here,
// with r.
func (a *Adapter) producerID(ctx context.Context, key, topic string, epoch int64, unconnected bool) (r dispatch.Result, ok bool) {
	for try := 1; ; try++ {
		_, _, err := a.cl.ProducerID(ctx)
		if err == nil {
			return dispatch.Result{}, true
		}
		ke, answered := errors.AsType[*kerr.Error](err)
		if answered && !ke.Retriable || errors.Is(err, kgo.ErrClientClosed) {
			a.acks.abandon(key)
			return classify(err, topic), false
		}
		if ctx.Err() == nil {
			t := time.NewTimer(retryBackoff(try))
			select {
			case <-t.C:
				continue
			case <-ctx.Done():
				t.Stop()
			}
		}
		a.acks.abandon(key)
		if r, ok := a.unconnected(ctx, topic, epoch, unconnected); ok {
			return r, false
		}
		reason := dispatch.ReasonTimeout
		if errors.Is(ctx.Err(), context.Canceled) {
			reason = dispatch.ReasonCancelled
		}
		return dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Reason: reason,
			Err: a.describe(fmt.Errorf("not sent to topic %s: no producer id from the brokers within the attempt: %w", topic, err))}, false
	}
}

// unconnected answers an attempt that ended (ctx) without a broker
// connection open at any time during it (none open at its start,
// unconnected, and none opened since epoch): nothing was sent; refused by
// TLS, an auth outcome. ok is false when a connection was open.
func (a *Adapter) unconnected(ctx context.Context, topic string, epoch int64, unconnected bool) (dispatch.Result, bool) {
	if !unconnected || a.connects.Load() != epoch {
		return dispatch.Result{}, false
	}
	if a.tlsRefused.Load() {
		return dispatch.Result{Outcome: dispatch.Auth, NotSent: true, Reason: dispatch.ReasonAuth,
			Err: a.describe(fmt.Errorf("not sent to topic %s: TLS refused", topic))}, true
	}
	reason := dispatch.ReasonConnect
	if errors.Is(ctx.Err(), context.Canceled) {
		reason = dispatch.ReasonCancelled
	}
	return dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Reason: reason,
		Err: a.describe(fmt.Errorf("not sent to topic %s: no broker connection within the attempt: %w", topic, ctx.Err()))}, true
}

// record builds the row's record: value = payload, key = business scope
// (the row key when the scope is empty), the idempotency headers.
func (a *Adapter) record(topic string, m *dispatch.Message) *kgo.Record {
	key := m.Tuple.BusinessScope
	if key == "" {
		key = m.Key
	}
	rec := &kgo.Record{
		Topic: topic,
		Key:   []byte(key),
		Value: m.Payload,
		Headers: []kgo.RecordHeader{
			{Key: HeaderIdempotencyKey, Value: []byte(m.Key)},
			{Key: HeaderTuple, Value: []byte(m.Tuple.Encoded())},
		},
	}
	if m.Traceparent != "" {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderTraceparent, Value: []byte(m.Traceparent)})
	}
	return rec
}

// describe adds the latest failure to reach a broker to an error about a
// missing acknowledgement, when there is one.
func (a *Adapter) describe(err error) error {
	if err == nil {
		return nil
	}
	if d := a.lastDialErr.Load(); d != nil {
		return fmt.Errorf("%w (last failure to reach a broker: %s)", err, *d)
	}
	return err
}

// ack is where a record was stored: the response of a success.
type ack struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// JSON returns the response body of a success.
func (k ack) JSON() json.RawMessage {
	b, _ := json.Marshal(k) // cannot fail
	return b
}

// dialHook counts the open connections and keeps the latest connection
// failure, forgotten once a connection succeeds.
type dialHook struct{ a *Adapter }

var (
	_ kgo.HookBrokerConnect    = dialHook{}
	_ kgo.HookBrokerDisconnect = dialHook{}
)

// OnBrokerConnect implements kgo.HookBrokerConnect.
func (h dialHook) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err == nil {
		h.a.openConns.Add(1)
		h.a.connects.Add(1)
		h.a.lastDialErr.Store(nil)
		h.a.tlsRefused.Store(false)
		return
	}
	h.a.tlsRefused.Store(tlsRefusal(err))
	s := fmt.Sprintf("%s:%d: %v", meta.Host, meta.Port, err)
	h.a.lastDialErr.Store(&s)
}

// OnBrokerDisconnect implements kgo.HookBrokerDisconnect.
func (h dialHook) OnBrokerDisconnect(kgo.BrokerMetadata, net.Conn) { h.a.openConns.Add(-1) }

// tlsRefusal reports whether err is a failed TLS verification: a broker
// certificate not signed by the configured CA, for another name, expired;
// or the broker refusing the client's certificate.
func tlsRefusal(err error) bool {
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.UnknownAuthorityError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.HostnameError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.CertificateInvalidError](err); ok {
		return true
	}
	_, ok := errors.AsType[tls.AlertError](err)
	return ok
}
