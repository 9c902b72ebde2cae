package natsjs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/drainer-io/drainer/dispatch"
)

// Headers set on every message.
const (
	headerIdempotencyKey = "Idempotency-Key"
	headerTuple          = "X-Agent-Idempotency-Tuple"
)

// Adapter publishes rows to JetStream. It is safe for concurrent use.
type Adapter struct {
	cfg     Config
	subject subject
	nc      *nats.Conn
	js      jetstream.JetStream
	pubOpts []jetstream.PublishOpt
	// closed is closed by the connection's ClosedHandler.
	closed chan struct{}
}

var (
	_ dispatch.Adapter  = (*Adapter)(nil)
	_ dispatch.KeyTTLer = (*Adapter)(nil)
)

// New validates cfg (after WithDefaults) and connects. Reconnection is
// enabled, without limit; publishes are never buffered while reconnecting.
// When cfg.Stream is set, New fails unless that stream exists and captures
// the subject; otherwise a subject that no stream captures is only logged.
// Errors never quote the server URLs.
func New(ctx context.Context, cfg Config) (*Adapter, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	subj, _ := parseSubject(cfg.Subject) // validated
	a := &Adapter{cfg: cfg, subject: subj, closed: make(chan struct{})}
	// Never wait for the ack's request to be retried on "no responders":
	// that answer is final for this attempt, and the engine's backoff,
	// not a worker slot, should do the waiting.
	a.pubOpts = []jetstream.PublishOpt{jetstream.WithRetryAttempts(0)}
	if cfg.Stream != "" {
		a.pubOpts = append(a.pubOpts, jetstream.WithExpectStream(cfg.Stream))
	}
	if err := a.connect(ctx); err != nil {
		return nil, err
	}
	if err := a.checkStream(ctx); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

func (a *Adapter) connect(ctx context.Context) error {
	timeout := a.cfg.Timeout
	if d, ok := ctx.Deadline(); ok {
		timeout = max(min(timeout, time.Until(d)), time.Millisecond)
	}
	log := a.cfg.Logger
	var once sync.Once
	nc, err := nats.Connect(strings.Join(a.cfg.Servers, ","),
		nats.Name(a.cfg.Name),
		nats.Timeout(timeout),
		nats.MaxReconnects(-1),
		nats.ReconnectBufSize(-1),
		nats.DrainTimeout(a.cfg.Timeout),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) { log.Info("nats reconnected") }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			log.Warn("nats async error", "err", err)
		}),
		nats.ClosedHandler(func(*nats.Conn) { once.Do(func() { close(a.closed) }) }),
	)
	if err != nil {
		return fmt.Errorf("connect to nats: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return fmt.Errorf("jetstream: %w", err)
	}
	a.nc, a.js = nc, js
	return nil
}

// Close drains the connection (in-flight publishes get their
// acknowledgements) and waits, at most the timeout, until it is closed. It
// is idempotent.
func (a *Adapter) Close() error {
	if err := a.nc.Drain(); err != nil {
		a.nc.Close()
	}
	select {
	case <-a.closed:
	case <-time.After(a.cfg.Timeout + time.Second):
		a.nc.Close()
		<-a.closed
	}
	return nil
}

// Dispatch publishes the row's payload and waits for the acknowledgement:
// Success with {"stream", "seq", "duplicate": false}, or Replay (same shape,
// "duplicate": true, seq of the stored message) when the stream already
// holds the key.
func (a *Adapter) Dispatch(ctx context.Context, m *dispatch.Message) dispatch.Result {
	subj, err := a.subject.expand(m.Tuple.ToolName)
	if err != nil {
		return dispatch.Result{Outcome: dispatch.Terminal, NotSent: true, Reason: ReasonInvalidSubject, Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	if err := ctx.Err(); err != nil {
		reason := dispatch.ReasonCancelled
		if errors.Is(err, context.DeadlineExceeded) {
			reason = dispatch.ReasonTimeout
		}
		return dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Reason: reason, Err: fmt.Errorf("not sent: %w", err)}
	}
	if !a.nc.IsConnected() {
		return dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Reason: dispatch.ReasonConnect,
			Err: fmt.Errorf("not sent: nats connection is %s", strings.ToLower(a.nc.Status().String()))}
	}
	msg := &nats.Msg{Subject: subj, Data: m.Payload, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, m.Key)
	msg.Header.Set(headerIdempotencyKey, m.Key)
	msg.Header.Set(headerTuple, m.Tuple.Encoded())
	ack, err := a.js.PublishMsg(ctx, msg, a.pubOpts...)
	if err != nil {
		return classify(ctx, err)
	}
	r := dispatch.Result{Outcome: dispatch.Success, Reason: ReasonStored, Response: ackResponse(ack)}
	if ack.Duplicate {
		if a.storedOther(ctx, ack, m) {
			return dispatch.Result{Outcome: dispatch.Terminal, NotSent: true, Reason: dispatch.ReasonPayloadMismatch,
				Err: fmt.Errorf("stream %s already holds this key (seq %d) with another payload", ack.Stream, ack.Sequence)}
		}
		r.Outcome, r.Reason = dispatch.Replay, dispatch.ReasonReplay
	}
	return r
}

func ackResponse(ack *jetstream.PubAck) json.RawMessage {
	b, _ := json.Marshal(struct {
		Stream    string `json:"stream"`
		Seq       uint64 `json:"seq"`
		Duplicate bool   `json:"duplicate"`
	}{ack.Stream, ack.Sequence, ack.Duplicate}) // cannot fail
	return b
}

// storedOther reports whether the message a duplicate acknowledgement points
// at is still in the stream, carries the key and holds another payload. Any
// doubt (the message was removed by limits or a consumer, the lookup failed
// or was not permitted) gives false: the duplicate stands as a replay.
func (a *Adapter) storedOther(ctx context.Context, ack *jetstream.PubAck, m *dispatch.Message) bool {
	if ack.Sequence == 0 {
		return false
	}
	s, err := a.js.Stream(ctx, ack.Stream)
	if err != nil {
		return false
	}
	stored, err := s.GetMsg(ctx, ack.Sequence)
	if err != nil || stored.Header.Get(jetstream.MsgIDHeader) != m.Key {
		return false
	}
	return !bytes.Equal(stored.Data, m.Payload)
}
