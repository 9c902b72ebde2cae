package kafka_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/builtin"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
	"github.com/drainer-io/drainer/dispatch/kafka"
)

// TestBuiltinBrokerLater builds a kafka adapter from a config file the way
// `drainer run` does while no broker listens: the build succeeds, the
// adapter is not ready and holds its rows back without an attempt; once a
// broker listens it becomes ready and writes. key_ttl, left unset, is the
// type's default.
func TestBuiltinBrokerLater(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	file := `
adapters:
  events:
    type: kafka
    brokers: ["` + addr + `"]
    topic: orders
    timeout: 1s
routes:
  create_order: {adapter: events}
`
	cfg, err := config.Parse("drainer.yaml", []byte(file), config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := builtin.Build(t.Context(), cfg, builtin.Options{})
	if err != nil {
		t.Fatalf("build without a broker: %v", err)
	}
	defer reg.Close(context.Background())
	e, _ := reg.Get("events")
	if e.KeyTTL != kafka.DefaultKeyTTL {
		t.Errorf("key_ttl %s, want the type's default %s", e.KeyTTL, kafka.DefaultKeyTTL)
	}
	a := e.Adapter.(*kafka.Adapter)
	if a.Ready() {
		t.Fatal("ready without a broker")
	}
	r := a.Dispatch(t.Context(), dispatchtest.NewMessage("create_order", `{}`))
	if r.Outcome != dispatch.Retry || !r.NotSent || r.Reason != dispatch.ReasonNotReady {
		t.Fatalf("dispatch before a broker: %s (%s, NotSent %v, %v), want retry not_ready, not sent", r.Outcome, r.Reason, r.NotSent, r.Err)
	}

	_, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(p), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatalf("start a broker on %s: %v", addr, err)
	}
	defer c.Close()
	deadline := time.Now().Add(time.Minute)
	for !a.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("not ready a minute after the broker started")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r := a.Dispatch(t.Context(), dispatchtest.NewMessage("create_order", `{}`)); r.Outcome != dispatch.Success {
		t.Fatalf("dispatch once ready: %s (%s, %v)", r.Outcome, r.Reason, r.Err)
	}
}
