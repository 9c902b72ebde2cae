package kafka

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/drainer-io/drainer/dispatch"
)

// wantErrText checks that a failure's error says what happened.
func wantErrText(t *testing.T, r dispatch.Result, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(r.Err.Error(), p) {
			t.Errorf("error %q does not say %q", r.Err, p)
		}
	}
}

// TestUnknownTopic: a topic that does not exist (and is not created by the
// brokers) is retried, not sent, with an error naming the topic.
func TestUnknownTopic(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	a := newAdapter(t, c, Config{Topic: "no-such-topic"})
	r := dispatchOnce(t, a, newMessage("create_order", "s", `{}`))
	wantOutcome(t, "unknown topic", r, dispatch.Retry, ReasonUnknownTopic)
	if !r.NotSent || !r.AwaitsFix {
		t.Errorf("unknown topic: NotSent %v, AwaitsFix %v; want both (it waits for the topic, and does not open the breaker)", r.NotSent, r.AwaitsFix)
	}
	wantErrText(t, r, "no-such-topic", "does not exist")
}

// authTimeout bounds an attempt of TestAuthorization: long, so that on a
// busy machine the broker's refusal, not the attempt's deadline, ends it.
const authTimeout = 30 * time.Second

// TestAuthorization: a SASL user without write permission on the topic,
// a refused idempotent producer id (cluster authorization), and a wrong
// password are each an auth outcome: no attempt consumed.
func TestAuthorization(t *testing.T) {
	t.Parallel()
	const user, pass = "drainer", "kafka-pass-8c1d"
	c := newCluster(t, kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("PLAIN", "admin", "admin"),
		kfake.User("PLAIN", user, pass,
			kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: "other", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationAll, Allow: true},
			kfake.ACL{Resource: kmsg.ACLResourceTypeCluster, Name: "kafka-cluster", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationAll, Allow: true},
		),
		kfakeSeed("other"))

	t.Run("topic", func(t *testing.T) {
		a := newAdapter(t, c, Config{Timeout: authTimeout, SASL: &SASL{Mechanism: MechanismPlain, Username: user, Password: pass}})
		r := dispatchOnce(t, a, newMessage("create_order", "s", `{}`))
		wantOutcome(t, "topic not authorized", r, dispatch.Auth, dispatch.ReasonAuth)
		wantErrText(t, r, "TOPIC_AUTHORIZATION_FAILED", topicOrders)
		ok := newAdapter(t, c, Config{Topic: "other", Timeout: authTimeout, SASL: &SASL{Mechanism: MechanismPlain, Username: user, Password: pass}})
		wantOutcome(t, "authorized topic", dispatchOnce(t, ok, newMessage("create_order", "s", `{}`)), dispatch.Success, "")
	})
	t.Run("cluster", func(t *testing.T) {
		h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.InitProducerID}, Err: kerr.ClusterAuthorizationFailed, Count: -1})
		defer h.Remove()
		// The client's own log (producer id requests, connections) goes
		// to the test's output, shown if the outcome is not the one
		// wanted, with how many producer id requests the broker refused.
		a := newAdapter(t, c, Config{Topic: "other", Timeout: authTimeout, SASL: &SASL{Mechanism: MechanismPlain, Username: user, Password: pass},
			Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))})
		r := dispatchOnce(t, a, newMessage("create_order", "s", `{}`))
		if r.Outcome != dispatch.Auth {
			t.Logf("the broker refused %d producer id requests", h.Hits())
		}
		wantOutcome(t, "cluster not authorized", r, dispatch.Auth, dispatch.ReasonAuth)
		wantErrText(t, r, "CLUSTER_AUTHORIZATION_FAILED")
	})
	t.Run("sasl", func(t *testing.T) {
		// A broker answers a wrong password with SASL_AUTHENTICATION_FAILED
		// (the test broker closes the connection instead: answer as a
		// broker does).
		c.ControlKey(int16(kmsg.SASLAuthenticate), func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
			resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
			msg := "Authentication failed: Invalid username or password"
			resp.ErrorMessage = &msg
			return resp, nil, true
		})
		const wrong = "wrong-pass-77ae"
		a := newAdapter(t, c, Config{Topic: "other", Timeout: authTimeout, SASL: &SASL{Mechanism: MechanismPlain, Username: user, Password: wrong}})
		r := dispatchOnce(t, a, newMessage("create_order", "s", `{}`))
		wantOutcome(t, "wrong password", r, dispatch.Auth, dispatch.ReasonAuth)
		if strings.Contains(r.Err.Error(), wrong) {
			t.Errorf("error reveals the password: %v", r.Err)
		}
		// At startup this is a refusal (the build fails), not an outage.
		if err := a.Probe(t.Context()); err == nil || errors.Is(err, dispatch.ErrUnavailable) || strings.Contains(err.Error(), wrong) {
			t.Errorf("Probe with a wrong password: %v, want a refusal without the password", err)
		}
	})
}

// TestTooLarge: a record above the broker's message.max.bytes, and one
// above the client's own batch limit, are terminal and not written.
func TestTooLarge(t *testing.T) {
	t.Parallel()
	c := newCluster(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "2048"}))
	a := newAdapter(t, c, Config{})
	big := `{"blob":"` + incompressible(4096) + `"}`
	r := dispatchOnce(t, a, newMessage("create_order", "s", big))
	wantOutcome(t, "above message.max.bytes", r, dispatch.Terminal, ReasonTooLarge)
	wantErrText(t, r, "MESSAGE_TOO_LARGE", topicOrders)
	huge := `{"blob":"` + incompressible(2<<20) + `"}`
	r = dispatchOnce(t, a, newMessage("create_order", "s", huge))
	wantOutcome(t, "above the client's batch limit", r, dispatch.Terminal, ReasonTooLarge)
	wantOutcome(t, "a small record after", dispatchOnce(t, a, newMessage("create_order", "s", `{}`)), dispatch.Success, "")
	if n := len(readAll(t, c.ListenAddrs(), topicOrders)); n != 1 {
		t.Errorf("topic holds %d records, want 1", n)
	}
}

// TestInjectedProduceErrors: a broker refusing produce requests with a
// retriable code is absorbed by the client's own retries when it stops
// soon; when it keeps refusing, the attempt is a Retry naming the code
// (not written), and the next attempt succeeds with one record.
func TestInjectedProduceErrors(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	a := newAdapter(t, c, Config{})
	for _, code := range []*kerr.Error{kerr.NotEnoughReplicas, kerr.NotLeaderForPartition, kerr.KafkaStorageError} {
		t.Run(code.Message, func(t *testing.T) {
			h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topicOrders, Err: code, Count: 1})
			m := newMessage("create_order", "s", `{}`)
			wantOutcome(t, "one refusal", dispatchOnce(t, a, m), dispatch.Success, "")
			if h.Hits() != 1 {
				t.Errorf("fault hit %d times, want 1", h.Hits())
			}
			h = c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topicOrders, Err: code, Count: -1})
			m = newMessage("create_order", "s", `{}`)
			r := dispatchOnce(t, a, m)
			h.Remove()
			t.Logf("%s: the attempt ended after %d produce requests", code.Message, h.Hits())
			wantOutcome(t, "refused on every try", r, dispatch.Retry, ReasonBroker)
			wantErrText(t, r, code.Message, topicOrders)
			// The broker answered: the attempt counts, so a broker that
			// refuses every time fails the row at max_attempts.
			if r.NotSent || !r.Refused {
				t.Errorf("a refused record: NotSent %v, Refused %v; want Refused", r.NotSent, r.Refused)
			}
			wantOutcome(t, "next attempt", dispatchOnce(t, a, m), dispatch.Success, "")
		})
	}
	// Answers after which the broker may have written the record.
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topicOrders, Err: kerr.PolicyViolation, Count: 1})
	r := dispatchOnce(t, a, newMessage("create_order", "s", `{}`))
	wantOutcome(t, "policy violation", r, dispatch.Terminal, ReasonRejected)
	copies := copiesByKey(readAll(t, c.ListenAddrs(), topicOrders))
	for k, n := range copies {
		if n != 1 {
			t.Errorf("key %s written %d times", k, n)
		}
	}
	if len(copies) != 6 {
		t.Errorf("%d keys written, want 6", len(copies))
	}
}

// TestBrokerDown: no broker listening is a Retry, not sent, whose error
// names the broker that could not be reached; once one listens, the next
// attempt is written.
func TestBrokerDown(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	a, err := New(Config{Brokers: []string{addr}, Topic: topicOrders, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	m := newMessage("create_order", "s", `{}`)
	r := dispatchOnce(t, a, m)
	wantOutcome(t, "no broker", r, dispatch.Retry, dispatch.ReasonConnect)
	if !r.NotSent {
		t.Error("no broker: NotSent false")
	}
	wantErrText(t, r, addr)
	if err := a.Probe(t.Context()); err == nil || !dispatch.Unavailable(err) {
		t.Errorf("Probe without a broker: %v, want an ErrUnavailable", err)
	}
}

// TestHang: a broker that never answers the produce request makes the
// attempt ambiguous once its deadline passes (the record may be written);
// a retry of the key while the request is still pending is not sent again.
func TestHang(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	a := newAdapter(t, c, Config{Timeout: 500 * time.Millisecond})
	wantOutcome(t, "warm up", dispatchOnce(t, a, newMessage("create_order", "s", `{}`)), dispatch.Success, "")
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) { return nil, nil, true })
	m := newMessage("create_order", "s", `{}`)
	r := dispatchOnce(t, a, m)
	wantOutcome(t, "no answer", r, dispatch.Ambiguous, dispatch.ReasonTimeout)
	wantErrText(t, r, "may be written")
	r = dispatchOnce(t, a, m)
	if r.Outcome == dispatch.Success || r.Outcome == dispatch.Replay {
		return // the request was failed and sent again on a new connection
	}
	if !(r.Outcome == dispatch.Retry && r.Reason == ReasonInFlight) && r.Outcome != dispatch.Ambiguous {
		t.Errorf("retry of a pending key: got %s (%s, %v)", r.Outcome, r.Reason, r.Err)
	}
}

// TestProducerIDHang: a broker that never answers the request for a
// producer id leaves the attempt with nothing sent once its deadline passes
// (no record can be produced without one), not with a record that may be
// written; the topic holds none. Once the broker answers, the row's next
// attempt (here another replica's) writes it once.
func TestProducerIDHang(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	var hung atomic.Bool
	hung.Store(true)
	c.ControlKey(int16(kmsg.InitProducerID), func(kmsg.Request) (kmsg.Response, error, bool) {
		if hung.Load() {
			c.KeepControl()
			return nil, nil, true // no answer
		}
		return nil, nil, false
	})
	a := newAdapter(t, c, Config{Timeout: 500 * time.Millisecond})
	m := newMessage("create_order", "s", `{}`)
	r := dispatchOnce(t, a, m)
	wantOutcome(t, "no producer id", r, dispatch.Retry, dispatch.ReasonTimeout)
	if !r.NotSent {
		t.Errorf("no producer id: NotSent false (%v)", r.Err)
	}
	wantErrText(t, r, "no producer id", topicOrders)
	if n := len(readAll(t, c.ListenAddrs(), topicOrders)); n != 0 {
		t.Fatalf("topic holds %d records after an attempt without a producer id, want 0", n)
	}
	hung.Store(false)
	wantOutcome(t, "the broker answering again", dispatchOnce(t, newAdapter(t, c, Config{}), m), dispatch.Success, "")
	if n := len(readAll(t, c.ListenAddrs(), topicOrders)); n != 1 {
		t.Fatalf("topic holds %d records, want 1", n)
	}
}

// TestClosedAdapter: an attempt on a closed adapter is a retry, not sent,
// whose reason says so, and it does not wait for its deadline.
func TestClosedAdapter(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	a := newAdapter(t, c, Config{Timeout: time.Minute})
	if err := a.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := dispatchOnce(t, a, newMessage("create_order", "s", `{}`))
	wantOutcome(t, "closed", r, dispatch.Retry, ReasonClosed)
	if !r.NotSent {
		t.Errorf("closed: NotSent false (%v)", r.Err)
	}
}

// incompressible returns n hex digits of random bytes: compression cannot
// bring them under a size limit.
func incompressible(n int) string {
	b := make([]byte, n/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// TestLostAcknowledgement: a broker that writes the record but whose
// answer is lost (REQUEST_TIMED_OUT after the append) makes the attempt
// ambiguous. A new producer session (a restarted
// drainer, another replica) writes a second copy with the same
// Idempotency-Key header, which is why consumers deduplicate on it.
func TestLostAcknowledgement(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	a := newAdapter(t, c, Config{Timeout: time.Second})
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topicOrders, Err: kerr.RequestTimedOut, Count: -1})
	m := newMessage("create_order", "order-7", `{"order_id":"7"}`)
	r := dispatchOnce(t, a, m)
	h.Remove()
	// The client keeps sending it (the broker may have written it) until
	// the attempt's deadline.
	wantOutcome(t, "answer lost", r, dispatch.Ambiguous, "")
	wantErrText(t, r, "may be written")

	restarted := newAdapter(t, c, Config{})
	wantOutcome(t, "sent again by a new producer session", dispatchOnce(t, restarted, attemptN(m, 2)), dispatch.Success, "")
	copies := copiesByKey(readAll(t, c.ListenAddrs(), topicOrders))
	if copies[m.Key] != 2 {
		t.Errorf("%d records carry the key, want 2 (the lost acknowledgement's and the retry's)", copies[m.Key])
	}
}

// TestTopicRecreated: a topic deleted and created again has a new topic
// id, which the client does not adopt by itself (every produce to it would
// be refused UNKNOWN_TOPIC_ID until the daemon restarted). The adapter
// makes the client learn the topic anew: the rows go through without a
// restart, and no attempt in between is taken for one that may be written.
func TestTopicRecreated(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	a := newAdapter(t, c, Config{Topic: topicOrders})
	wantOutcome(t, "before", dispatchOnce(t, a, newMessage("create_order", "s", `{}`)), dispatch.Success, "")

	admCl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	ctx := t.Context()
	if _, err := adm.DeleteTopic(ctx, topicOrders); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topicOrders); err != nil {
		t.Fatal(err)
	}
	// A generous bound for "not stuck until a restart", never a timing.
	var last dispatch.Result
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		last = dispatchOnce(t, a, newMessage("create_order", "s", `{}`))
		if last.Succeeded() {
			break
		}
		if !last.NotSent {
			t.Fatalf("an attempt to the recreated topic: %s (%v), not NotSent: nothing was written", last.Outcome, last.Err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the recreated topic still refuses a minute later: %s (%v)", last.Outcome, last.Err)
		}
	}
}
