package gateway

import (
	"context"
	"encoding/json"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
)

// TestIdleGatewayLetsKeptResultsExpire: while the gateway serves, with no
// call at all, each tool's Oversized is looked up with key "" every
// sweepEvery, which lets the results kept past their time go (the mcp
// adapter's cache expires on each lookup); Shutdown stops it. Before, the
// results expired only on the next call's lookup or the next result kept:
// an idle gateway held them (40 results of 3 MB: 85 MB of heap).
func TestIdleGatewayLetsKeptResultsExpire(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st, err := store.New(storetest.Schema)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var sweeps, lookups atomic.Int32
	oversized := func(key string) (json.RawMessage, bool) {
		if key == "" {
			sweeps.Add(1)
		} else {
			lookups.Add(1)
		}
		return nil, false
	}
	g, err := New(Config{Listener: ln, DB: pool, Store: st,
		Tools: []Tool{{Name: "big", Adapter: "tools", Oversized: oversized}, {Name: "plain", Adapter: "tools"}}})
	if err != nil {
		t.Fatal(err)
	}
	g.sweepEvery = 20 * time.Millisecond
	if err := g.Serve(t.Context()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for sweeps.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the kept results were looked up %d times in a minute with no call; want every %s", sweeps.Load(), g.sweepEvery)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	after := sweeps.Load()
	time.Sleep(10 * g.sweepEvery)
	if n := sweeps.Load(); n != after {
		t.Fatalf("%d lookups after Shutdown; want none", n-after)
	}
	if n := lookups.Load(); n != 0 {
		t.Fatalf("%d lookups of a key with no call", n)
	}
}
