package natsjs

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
	"github.com/drainer-io/drainer/dispatch/natsjs/natsjstest"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// payloadSecret must never appear in an error.
const payloadSecret = "payload-s3cr3t-0e4d"

const testPayload = `{"amount":1250,"note":"` + payloadSecret + `"}`

func testMessage(tool string) *dispatch.Message {
	return dispatchtest.NewMessage(tool, testPayload)
}

func newAdapter(t testing.TB, cfg Config) *Adapter {
	t.Helper()
	cfg.Timeout = cmpOr(cfg.Timeout, 5*time.Second)
	a, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

type ackRef struct {
	Stream    string `json:"stream"`
	Seq       uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate"`
}

func dispatchOK(t *testing.T, a *Adapter, m *dispatch.Message, want dispatch.Outcome) ackRef {
	t.Helper()
	r := a.Dispatch(t.Context(), m)
	if r.Outcome != want || r.Err != nil {
		t.Fatalf("Dispatch = %s (reason %q, err %v), want %s", r.Outcome, r.Reason, r.Err, want)
	}
	var ref ackRef
	if err := json.Unmarshal(r.Response, &ref); err != nil || ref.Seq == 0 || ref.Duplicate != (want == dispatch.Replay) {
		t.Fatalf("response %s: %v", r.Response, err)
	}
	return ref
}

func assertRedacted(t *testing.T, r dispatch.Result) {
	t.Helper()
	if r.Err != nil && (strings.Contains(r.Err.Error(), payloadSecret) || strings.Contains(r.Err.Error(), credential)) {
		t.Errorf("Err reveals the payload or the credential: %v", r.Err)
	}
}

func wantResult(t *testing.T, what string, r dispatch.Result, outcome dispatch.Outcome, notSent bool, reason string) {
	t.Helper()
	assertRedacted(t, r)
	if r.Outcome != outcome || r.NotSent != notSent || r.Reason != reason || r.Err == nil {
		t.Errorf("%s: %s NotSent=%v (reason %q, err %v), want %s NotSent=%v reason %q",
			what, r.Outcome, r.NotSent, r.Reason, r.Err, outcome, notSent, reason)
	}
}

func TestPublish(t *testing.T) {
	t.Parallel()
	e := newNATSEnv(t, sharedServer(t))
	subject := e.prefix + ".intents"
	stream := e.createStream(t, streamSpec{subjects: []string{subject}})
	a := newAdapter(t, Config{Servers: []string{e.url}, Subject: subject})
	m := testMessage("charge_card")

	ref := dispatchOK(t, a, m, dispatch.Success)
	if ref.Stream != stream {
		t.Errorf("ack names stream %q, want %q", ref.Stream, stream)
	}
	stored := e.messages(t, stream, m.Key)
	if len(stored) != 1 {
		t.Fatalf("stream holds %d messages with the key, want 1", len(stored))
	}
	got := stored[0]
	if got.Sequence != ref.Seq || got.Subject != subject || string(got.Data) != testPayload {
		t.Errorf("stored seq %d subject %q data %q", got.Sequence, got.Subject, got.Data)
	}
	for name, want := range map[string]string{
		"Nats-Msg-Id": m.Key, "Idempotency-Key": m.Key, "X-Agent-Idempotency-Tuple": m.Tuple.Encoded(),
	} {
		if v := got.Header.Get(name); v != want {
			t.Errorf("header %s = %q, want %q", name, v, want)
		}
	}
}

func TestDuplicatePublishIsReplay(t *testing.T) {
	t.Parallel()
	e := newNATSEnv(t, sharedServer(t))
	subject := e.prefix + ".intents"
	stream := e.createStream(t, streamSpec{subjects: []string{subject}})
	a := newAdapter(t, Config{Servers: []string{e.url}, Subject: subject})
	other := newAdapter(t, Config{Servers: []string{e.url}, Subject: subject, Stream: stream}) // another replica
	m := testMessage("charge_card")

	first := dispatchOK(t, a, m, dispatch.Success)
	again := dispatchOK(t, a, m, dispatch.Replay)
	replica := dispatchOK(t, other, m, dispatch.Replay)
	if again.Seq != first.Seq || replica.Seq != first.Seq {
		t.Errorf("replays point at seq %d and %d, want the stored %d", again.Seq, replica.Seq, first.Seq)
	}
	if n := len(e.messages(t, stream, m.Key)); n != 1 {
		t.Errorf("stream holds %d messages with the key, want 1", n)
	}

	mismatch := *m
	mismatch.Payload = json.RawMessage(`{"amount":99,"note":"` + payloadSecret + `"}`)
	wantResult(t, "same key, another payload", a.Dispatch(t.Context(), &mismatch), dispatch.Terminal, true, dispatch.ReasonPayloadMismatch)
}

func TestTemplatedSubject(t *testing.T) {
	t.Parallel()
	e := newNATSEnv(t, sharedServer(t))
	streams := map[string]string{
		"charge_card": e.createStream(t, streamSpec{name: "_CHARGE", subjects: []string{e.prefix + ".charge_card.intents"}, duplicates: 5 * time.Minute}),
		"refund_card": e.createStream(t, streamSpec{name: "_REFUND", subjects: []string{e.prefix + ".refund_card.intents"}, duplicates: 3 * time.Minute}),
	}
	a := newAdapter(t, Config{Servers: []string{e.url}, Subject: e.prefix + ".{tool_name}.intents"})

	for tool, stream := range streams {
		m := testMessage(tool)
		if ref := dispatchOK(t, a, m, dispatch.Success); ref.Stream != stream {
			t.Errorf("%s stored in %q, want %q", tool, ref.Stream, stream)
		}
		if got := e.messages(t, stream, m.Key); len(got) != 1 || got[0].Subject != e.prefix+"."+tool+".intents" {
			t.Errorf("%s: messages %v", tool, got)
		}
	}
	for _, tool := range []string{"charge.card", "*", ">", "with space", "tab\t"} {
		r := a.Dispatch(t.Context(), testMessage(tool))
		wantResult(t, "tool "+tool, r, dispatch.Terminal, true, dispatch.ReasonUnsendable)
	}
	ttl, err := a.KeyTTL(t.Context())
	if err != nil || ttl != 3*time.Minute {
		t.Errorf("KeyTTL = %v, %v; want the shortest window of the capturing streams, 3m", ttl, err)
	}
}

func TestKeyTTL(t *testing.T) {
	t.Parallel()
	e := newNATSEnv(t, sharedServer(t))
	subject := e.prefix + ".intents"
	stream := e.createStream(t, streamSpec{subjects: []string{subject}, duplicates: 90 * time.Second})
	for _, named := range []string{"", stream} {
		a := newAdapter(t, Config{Servers: []string{e.url}, Subject: subject, Stream: named})
		if ttl, err := a.KeyTTL(t.Context()); err != nil || ttl != 90*time.Second {
			t.Errorf("stream %q: KeyTTL = %v, %v; want the duplicate window, 1m30s", named, ttl, err)
		}
	}
	orphan := newAdapter(t, Config{Servers: []string{e.url}, Subject: e.prefix + ".nowhere"})
	if ttl, err := orphan.KeyTTL(t.Context()); err == nil || !strings.Contains(err.Error(), "set key_ttl") {
		t.Errorf("no capturing stream: KeyTTL = %v, %v; want an error", ttl, err)
	}
}

func TestExpectedStream(t *testing.T) {
	t.Parallel()
	e := newNATSEnv(t, sharedServer(t))
	subject := e.prefix + ".intents"
	stream := e.createStream(t, streamSpec{name: "_A", subjects: []string{subject}})
	elsewhere := e.createStream(t, streamSpec{name: "_ELSEWHERE", subjects: []string{e.prefix + ".other"}})
	for named, want := range map[string]string{
		e.name + "_MISSING": "does not exist",
		elsewhere:           "does not capture subject",
	} {
		if a, err := New(t.Context(), Config{Servers: []string{e.url}, Subject: subject, Stream: named}); err == nil || !strings.Contains(err.Error(), want) {
			if a != nil {
				a.Close()
			}
			t.Errorf("stream %s: New = %v, want %q", named, err, want)
		}
	}

	a := newAdapter(t, Config{Servers: []string{e.url}, Subject: subject, Stream: stream})
	dispatchOK(t, a, testMessage("charge_card"), dispatch.Success)
	// Another stream takes the subject over: publishes are refused, not stored there.
	e.deleteStream(t, stream)
	other := e.createStream(t, streamSpec{name: "_B", subjects: []string{subject}})
	m := testMessage("charge_card")
	wantResult(t, "another stream captures the subject", a.Dispatch(t.Context(), m), dispatch.Retry, true, ReasonStreamConfig)
	if n := len(e.messages(t, other, m.Key)); n != 0 {
		t.Errorf("the other stream stored %d messages", n)
	}
}

func TestNoStreamIsRetryNotSent(t *testing.T) {
	t.Parallel()
	e := newNATSEnv(t, sharedServer(t))
	a := newAdapter(t, Config{Servers: []string{e.url}, Subject: e.prefix + ".nowhere"})
	start := time.Now()
	wantResult(t, "no stream", a.Dispatch(t.Context(), testMessage("charge_card")), dispatch.Retry, true, ReasonNoStream)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("no responders took %v: the publish was retried in the adapter", d)
	}
}

func TestTooLargeIsTerminal(t *testing.T) {
	t.Parallel()
	e := newNATSEnv(t, sharedServer(t))
	subject := e.prefix + ".intents"
	e.createStream(t, streamSpec{subjects: []string{subject}})
	a := newAdapter(t, Config{Servers: []string{e.url}, Subject: subject})
	m := testMessage("charge_card")
	m.Payload = json.RawMessage(`{"note":"` + payloadSecret + strings.Repeat("x", int(a.nc.MaxPayload())) + `"}`)
	wantResult(t, "above max_payload", a.Dispatch(t.Context(), m), dispatch.Terminal, true, ReasonTooLarge)
}

// TestDisconnected cuts the connection: publishes fail at once as not sent
// (nothing is buffered for later), and succeed again after the reconnect.
func TestDisconnected(t *testing.T) {
	t.Parallel()
	e := newNATSEnv(t, sharedServer(t))
	subject := e.prefix + ".intents"
	stream := e.createStream(t, streamSpec{subjects: []string{subject}})
	p := newProxy(t, e.url)
	a := newAdapter(t, Config{Servers: []string{"nats://drainer:" + credential + "@" + p.addr()}, Subject: subject})
	dispatchOK(t, a, testMessage("charge_card"), dispatch.Success)

	p.cut(true)
	// The adapter exposes no signal of its connection's state: poll it.
	testkit.WaitFor(t, 15*time.Second, "the adapter to notice the disconnect", func() (bool, string) { return !a.nc.IsConnected(), "" })
	m := testMessage("charge_card")
	wantResult(t, "disconnected", a.Dispatch(t.Context(), m), dispatch.Retry, true, dispatch.ReasonConnect)

	p.cut(false)
	testkit.WaitFor(t, 15*time.Second, "the adapter to reconnect", func() (bool, string) { return a.nc.IsConnected(), "" })
	dispatchOK(t, a, m, dispatch.Success)
	if n := len(e.messages(t, stream, m.Key)); n != 1 {
		t.Errorf("stream holds %d messages with the key, want 1", n)
	}
}

func TestClosed(t *testing.T) {
	t.Parallel()
	e := newNATSEnv(t, sharedServer(t))
	subject := e.prefix + ".intents"
	e.createStream(t, streamSpec{subjects: []string{subject}})
	a, err := New(t.Context(), Config{Servers: []string{e.url}, Subject: subject})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	wantResult(t, "after Close", a.Dispatch(t.Context(), testMessage("charge_card")), dispatch.Retry, true, dispatch.ReasonConnect)
}

func TestNewErrorsAreRedacted(t *testing.T) {
	t.Parallel()
	_, err := New(t.Context(), Config{Servers: []string{"nats://u:" + credential + "@127.0.0.1:1"}, Subject: "a.b", Timeout: 2 * time.Second})
	if err == nil || strings.Contains(err.Error(), credential) {
		t.Errorf("New = %v; want an error without the password", err)
	}
	_, err = New(t.Context(), Config{Servers: []string{"http://u:" + credential + "@h"}, Subject: "a.*"})
	if err == nil || strings.Contains(err.Error(), credential) || !strings.Contains(err.Error(), "servers[0]") {
		t.Errorf("New = %v; want a config error naming servers[0] without the password", err)
	}
}

// TestInProcessServer runs the basics against a server started in this
// process, whichever server the other tests use.
func TestInProcessServer(t *testing.T) {
	t.Parallel()
	url, desc, stop, err := natsjstest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	t.Logf("using %s", desc)
	e := newNATSEnv(t, url)
	subject := e.prefix + ".intents"
	stream := e.createStream(t, streamSpec{subjects: []string{subject}, duplicates: time.Hour, file: true})
	a := newAdapter(t, Config{Servers: []string{url}, Subject: subject, Stream: stream})
	m := testMessage("charge_card")
	dispatchOK(t, a, m, dispatch.Success)
	dispatchOK(t, a, m, dispatch.Replay)
	if n := len(e.messages(t, stream, m.Key)); n != 1 {
		t.Errorf("stream holds %d messages with the key, want 1", n)
	}
	if ttl, err := a.KeyTTL(t.Context()); err != nil || ttl != time.Hour {
		t.Errorf("KeyTTL = %v, %v; want 1h", ttl, err)
	}
}
