package natsjs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
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
	// bg is the background start of an adapter whose server could not be
	// reached at startup: nc and js are set by its probe, and read only
	// once it no longer waits.
	bg dispatch.Background
}

var (
	_ dispatch.Adapter  = (*Adapter)(nil)
	_ dispatch.KeyTTLer = (*Adapter)(nil)
)

// New validates cfg (after WithDefaults) and connects. Reconnection is
// enabled, without limit; publishes are never buffered while reconnecting.
// When cfg.Stream is set, New fails unless that stream exists and captures
// the subject; otherwise a subject that no stream captures fails it with
// cfg.RequireStream, and is only logged without. A server that cannot be
// reached is an error wrapping dispatch.ErrUnavailable. Errors never quote
// the server URLs.
func New(ctx context.Context, cfg Config) (*Adapter, error) {
	a, err := build(cfg)
	if err != nil {
		return nil, err
	}
	if err := a.Probe(ctx); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// build validates cfg (after WithDefaults) and builds the adapter without
// connecting: Probe connects.
func build(cfg Config) (*Adapter, error) {
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
	return a, nil
}

// Probe connects, unless an earlier probe did, and checks the stream as New
// does. An error wrapping dispatch.ErrUnavailable says the server could not
// be reached (or JetStream did not answer in time); any other is a refusal
// or a configuration problem (credentials, TLS, a missing stream).
func (a *Adapter) Probe(ctx context.Context) error {
	if a.nc == nil {
		if err := a.connect(ctx); err != nil {
			return err
		}
	}
	err := a.checkStream(ctx)
	if err != nil && unreachable(err) {
		return dispatch.MarkUnavailable(err)
	}
	return err
}

// StartInBackground holds the adapter's rows back (dispatch.NotReady: no
// attempt consumed, the breaker not counting) until Probe succeeds, trying
// again with a doubling delay up to 5 s. Close stops it.
func (a *Adapter) StartInBackground(log *slog.Logger) {
	if log == nil {
		log = a.cfg.Logger
	}
	a.bg.Start(log, "nats", "server", a.Probe)
}

// Ready reports whether the adapter is not waiting for a background start.
func (a *Adapter) Ready() bool { return !a.bg.Waiting() }

// NotReadyReason says why the adapter is not ready (Ready false): its
// provider unreachable since startup, or refusing the start.
func (a *Adapter) NotReadyReason() string { return a.bg.Why("the server") }

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
		err = fmt.Errorf("connect to nats: %w", err)
		if unreachable(err) {
			return dispatch.MarkUnavailable(err)
		}
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return fmt.Errorf("jetstream: %w", err)
	}
	a.nc, a.js = nc, js
	return nil
}

// unreachable reports whether err says the server could not be reached or
// did not answer in time (no server answered, a dial failure, a timeout, a
// connection cut during the handshake), rather than that it refused the
// client (credentials, TLS) or the configuration.
func unreachable(err error) bool {
	if opErr, ok := errors.AsType[*net.OpError](err); ok && (opErr.Op == "remote error" || opErr.Op == "local error") {
		return false // a TLS alert: the server answered
	}
	_, netErr := errors.AsType[net.Error](err) // a dial error, a timeout (context.DeadlineExceeded too)
	return netErr || errors.Is(err, nats.ErrNoServers) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// Close stops a background start, drains the connection (in-flight
// publishes get their acknowledgements) and waits, at most the timeout,
// until it is closed. It is idempotent.
func (a *Adapter) Close() error {
	a.bg.Stop()
	if a.nc == nil {
		return nil
	}
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
// holds the key. Until a server has answered once since startup (a
// background start), the row is held back: dispatch.NotReady.
func (a *Adapter) Dispatch(ctx context.Context, m *dispatch.Message) dispatch.Result {
	subj, err := a.subject.expand(m.Tuple.ToolName)
	if err != nil {
		// The tool name is the row's for good: it can never be sent as it
		// stands, and the attempt counted at its claim is given back.
		return dispatch.Result{Outcome: dispatch.Terminal, NotSent: true, Reason: dispatch.ReasonUnsendable, Err: err}
	}
	if a.bg.Waiting() {
		return dispatch.NotReady(errors.New("nats: " + a.bg.Why("the server")))
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
