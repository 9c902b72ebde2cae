package natsjs_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/builtin"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
	"github.com/drainer-io/drainer/dispatch/natsjs"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// TestBuiltin builds a nats adapter from a config file the way `drainer
// run` does: key_ttl, left unset, becomes the stream's duplicate window.
func TestBuiltin(t *testing.T) {
	t.Parallel()
	url, subject := natsjs.NewTestStream(t, 7*time.Minute)
	file := `
adapters:
  events:
    type: nats
    servers: [` + url + `]
    subject: ` + subject + `
routes:
  charge_card: {adapter: events}
`
	cfg, err := config.Parse("drainer.yaml", []byte(file), config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := builtin.Build(t.Context(), cfg, builtin.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close(context.Background())
	e, ok := reg.Get("events")
	if !ok || e.KeyTTL != 7*time.Minute {
		t.Fatalf("entry %+v, want key_ttl 7m from the stream", e)
	}
	if r := e.Adapter.Dispatch(t.Context(), dispatchtest.NewMessage("charge_card", `{"x":1}`)); r.Outcome != dispatch.Success {
		t.Errorf("dispatch: %s (reason %q, err %v)", r.Outcome, r.Reason, r.Err)
	}
}

// buildEvents builds, the way `drainer run` does, a nats adapter "events"
// on server addr and subject, with the adapter keys extra; the log lines
// go to logs.
func buildEvents(t *testing.T, addr, subject, extra string, logs *testkit.Buffer) (*dispatch.Registry, error) {
	t.Helper()
	file := `
adapters:
  events:
    type: nats
    servers: ["nats://` + addr + `"]
    subject: ` + subject + `
    timeout: 2s
` + extra + `
routes:
  charge_card: {adapter: events}
`
	cfg, err := config.Parse("drainer.yaml", []byte(file), config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return builtin.Build(t.Context(), cfg, builtin.Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
}

// TestBuiltinServerLater builds a nats adapter with key_ttl set while no
// server listens on its address: the build succeeds with a log line naming
// the adapter, the adapter is not ready and holds its rows back without an
// attempt; once the server answers it becomes ready and publishes. Without
// key_ttl the build fails with dispatch.ErrUnavailable, which the daemon
// waits out (the stream's window must be read first).
func TestBuiltinServerLater(t *testing.T) {
	t.Parallel()
	url, subject := natsjs.NewTestStream(t, 7*time.Minute)
	server := testkit.NewLater(t, strings.TrimPrefix(url, "nats://"))

	var logs testkit.Buffer
	_, err := buildEvents(t, server.Addr, subject, "", &logs)
	if !dispatch.Unavailable(err) || !strings.Contains(err.Error(), "adapters.events") || !strings.Contains(err.Error(), "set key_ttl") {
		t.Fatalf("build without key_ttl, server down: %v; want an ErrUnavailable naming the adapter and key_ttl", err)
	}

	reg, err := buildEvents(t, server.Addr, subject, "    key_ttl: 5m", &logs)
	if err != nil {
		t.Fatalf("build with key_ttl, server down: %v", err)
	}
	defer reg.Close(context.Background())
	if !strings.Contains(logs.String(), "nats: server unreachable at startup") || !strings.Contains(logs.String(), "adapter=events") {
		t.Errorf("no log line naming the adapter:\n%s", logs.String())
	}
	e, _ := reg.Get("events")
	a := e.Adapter.(*natsjs.Adapter)
	if a.Ready() || e.KeyTTL != 5*time.Minute {
		t.Fatalf("ready %v, key_ttl %s; want not ready, 5m", a.Ready(), e.KeyTTL)
	}
	r := a.Dispatch(t.Context(), dispatchtest.NewMessage("charge_card", `{}`))
	if r.Outcome != dispatch.Retry || !r.NotSent || r.Reason != dispatch.ReasonNotReady {
		t.Fatalf("dispatch before the server: %s (%s, NotSent %v, %v), want retry not_ready, not sent", r.Outcome, r.Reason, r.NotSent, r.Err)
	}

	server.Open(t)
	testkit.WaitFor(t, time.Minute, "the adapter to connect", func() (bool, string) { return a.Ready(), "" })
	if r := a.Dispatch(t.Context(), dispatchtest.NewMessage("charge_card", `{}`)); r.Outcome != dispatch.Success {
		t.Fatalf("dispatch once ready: %s (%s, %v)", r.Outcome, r.Reason, r.Err)
	}
}

// TestBuiltinNoStream: a subject no stream captures, without key_ttl (read
// from that stream by default), fails the build with an error saying to
// create the stream or set key_ttl, and nothing claims that publishes will
// be retried; with key_ttl set the adapter starts, and that is logged.
func TestBuiltinNoStream(t *testing.T) {
	t.Parallel()
	url, captured := natsjs.NewTestStream(t, time.Minute)
	addr, subject := strings.TrimPrefix(url, "nats://"), captured+"_uncaptured"
	const retried = "publishes will be retried until one does"

	var logs testkit.Buffer
	_, err := buildEvents(t, addr, subject, "", &logs)
	if err == nil || dispatch.Unavailable(err) || !strings.Contains(err.Error(), "no jetstream stream captures subject") ||
		!strings.Contains(err.Error(), "create the stream, or set key_ttl") {
		t.Fatalf("build without key_ttl: %v; want a configuration error saying to create the stream or set key_ttl", err)
	}
	if strings.Contains(logs.String(), retried) {
		t.Errorf("a refused start logged that publishes will be retried:\n%s", logs.String())
	}

	reg, err := buildEvents(t, addr, subject, "    key_ttl: 5m", &logs)
	if err != nil {
		t.Fatalf("build with key_ttl: %v", err)
	}
	defer reg.Close(context.Background())
	if !strings.Contains(logs.String(), retried) {
		t.Errorf("no warning that no stream captures the subject:\n%s", logs.String())
	}
}
