package natsjs_test

import (
	"context"
	"testing"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/builtin"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
	"github.com/drainer-io/drainer/dispatch/natsjs"
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
