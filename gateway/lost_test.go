package gateway_test

import (
	"context"
	"errors"
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
	t.Parallel()
	g := startGateway(t, 2*time.Minute)
	s := g.client(t, agentHeaders("run-lost"))
	// Calls side by side until the daemon holds several connections
	// (how many a batch of calls opens depends on the machine's load);
	// then every connection of the daemon ended.
	const warm = 8
	calls := 0
	daemonConns := func() int {
		t.Helper()
		var n int
		if err := g.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'drainer'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	warmAndEnd := func(round string) {
		t.Helper()
		for batch := 0; batch == 0 || daemonConns() < 2; batch++ {
			if batch == 20 {
				t.Fatalf("%s: the daemon holds %d connection(s) after %d batches of %d calls side by side, want several", round, daemonConns(), batch, warm)
			}
			var wg sync.WaitGroup
			for i := range warm {
				wg.Go(func() {
					settledCall(t, s, "charge", map[string]any{"amount": i}, sdk.Meta{gateway.MetaStepID: fmt.Sprintf("%s-warm-%d-%d", round, batch, i)})
				})
			}
			wg.Wait()
			calls += warm
		}
		var killed int
		if err := g.pool.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'drainer'`).Scan(&killed); err != nil {
			t.Fatal(err)
		}
		if killed < 2 {
			t.Fatalf("%s: %d of the daemon's connections ended, want several", round, killed)
		}
	}
	after := func(round string, i int) error {
		meta := sdk.Meta{gateway.MetaStepID: fmt.Sprintf("%s-after-%d", round, i)}
		args := map[string]any{"amount": 100 + i}
		res, err := s.CallTool(context.Background(), &sdk.CallToolParams{Name: "charge", Arguments: args, Meta: meta})
		if err != nil {
			return fmt.Errorf("%s: call %d after the connections were ended: %w", round, i, err)
		}
		if st := res.Meta[gateway.MetaStatus]; st == "pending" || st == "in_flight" {
			res = settledCall(t, s, "charge", args, meta)
		}
		if res.IsError {
			return fmt.Errorf("%s: call %d after the connections were ended: %s", round, i, body(t, res))
		}
		return nil
	}
	// One call after another.
	warmAndEnd("one")
	for i := range 3 {
		if err := after("one", i); err != nil {
			t.Fatal(err)
		}
	}
	calls += 3
	// Calls side by side: those that lose their connections while another
	// checks the pool wait for that check.
	warmAndEnd("side")
	errs := make([]error, 6)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() { errs[i] = after("side", i) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	calls += len(errs)
	if n := g.ts.count(g.ts.effects, "charge"); n != calls {
		t.Fatalf("%d effects upstream, want %d", n, calls)
	}
}
