package gateway_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/gateway"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestCallsAreRecordedAfterTheConnectionsWereEnded: when the server ends
// every connection of the daemon (a restart, a fail-over, an operator's
// pg_terminate_backend), the next calls are recorded and answered, each
// with one effect, instead of being refused with "could not record" for
// each dead connection the pool still holds.
func TestCallsAreRecordedAfterTheConnectionsWereEnded(t *testing.T) {
	g := startGateway(t, 2*time.Minute)
	s := g.client(t, agentHeaders("run-lost"))
	// Calls side by side, so that the pool holds several connections.
	const warm = 8
	var wg sync.WaitGroup
	for i := range warm {
		wg.Go(func() {
			settledCall(t, s, "charge", map[string]any{"amount": i}, sdk.Meta{gateway.MetaStepID: fmt.Sprintf("warm-%d", i)})
		})
	}
	wg.Wait()
	var killed int
	if err := g.pool.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'drainer'`).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	if killed < 2 {
		t.Fatalf("%d of the daemon's connections ended, want several", killed)
	}
	for i := range 3 {
		meta := sdk.Meta{gateway.MetaStepID: fmt.Sprintf("after-%d", i)}
		res, err := s.CallTool(context.Background(), &sdk.CallToolParams{Name: "charge", Arguments: map[string]any{"amount": 100 + i}, Meta: meta})
		if err != nil {
			t.Fatalf("call %d after the connections were ended: %v", i, err)
		}
		if st := res.Meta[gateway.MetaStatus]; st == "pending" || st == "in_flight" {
			res = settledCall(t, s, "charge", map[string]any{"amount": 100 + i}, meta)
		}
		if res.IsError {
			t.Fatalf("call %d after the connections were ended: %s", i, body(t, res))
		}
	}
	if n := g.ts.count(g.ts.effects, "charge"); n != warm+3 {
		t.Fatalf("%d effects upstream, want %d", n, warm+3)
	}
}
