//go:build integration

package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/tooling/mockprovider"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// TestSagaSurvivesSIGKILL: forward steps succeed, the last step of every run
// fails terminally, and the daemon is SIGKILLed while the compensations are
// under way. A new daemon finishes every saga: each compensation has its
// effect exactly once at the provider, in reverse order, and every forward
// row ends compensated.
func TestSagaSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	const runs = 20
	p := mockprovider.New(mockprovider.Config{TerminalTools: map[string]int{"ship_order": 422}})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tool := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
		if tool == "refund_card" || tool == "release_stock" {
			time.Sleep(700 * time.Millisecond) // keep compensations in flight long enough to kill the daemon
		}
		p.ServeHTTP(w, r)
	}))
	defer srv.Close()

	dbURL, pool := newMigratedDB(t)
	dir := t.TempDir()
	cfg := fmt.Sprintf(`workers: 8
lease: 9s
adapters:
  provider:
    type: http
    url: %s/{tool_name}
    timeout: 3s
routes:
  charge_card: {adapter: provider, compensation: refund_card, backoff: {base: 50ms, cap: 200ms, max_retry_after: 5s}}
  reserve_stock: {adapter: provider, compensation: release_stock, backoff: {base: 50ms, cap: 200ms, max_retry_after: 5s}}
  ship_order: {adapter: provider, backoff: {max_retry_after: 5s}}
  refund_card: {adapter: provider, max_attempts: 20, backoff: {base: 50ms, cap: 200ms, max_retry_after: 5s}}
  release_stock: {adapter: provider, max_attempts: 20, backoff: {base: 50ms, cap: 200ms, max_retry_after: 5s}}
`, srv.URL)
	cfgPath := writeFile(t, dir, "drainer.yaml", cfg)
	ctx := context.Background()
	enqueue := func(run, step, tool string) {
		t.Helper()
		if _, err := pool.Exec(ctx, "SELECT drainer.enqueue($1, $2, $3, 'order', $4::jsonb)", run, step, tool, fmt.Sprintf(`{"run":%q}`, run)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range runs {
		run := fmt.Sprintf("order-%02d", i)
		enqueue(run, "1", "charge_card")
		enqueue(run, "2", "reserve_stock")
	}
	first := startDaemon(t, "first", "--config", cfgPath, "--database-url", dbURL)
	testkit.WaitFor(t, 30*time.Second, "forward steps succeeded", func() (bool, string) {
		c := statusCounts(t, pool)
		return c["succeeded"] == 2*runs, fmt.Sprint(c)
	})
	for i := range runs {
		enqueue(fmt.Sprintf("order-%02d", i), "3", "ship_order")
	}
	// Kill as soon as compensations are under way: some were sent, none finished.
	testkit.WaitFor(t, 30*time.Second, "compensations in flight", func() (bool, string) {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM drainer.outbox WHERE kind = 'compensation' AND status = 'in_flight'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n >= 4, fmt.Sprintf("%d in flight", n)
	})
	first.signal(syscall.SIGKILL)
	_ = first.wait(10 * time.Second)

	second := startDaemon(t, "second", "--config", cfgPath, "--database-url", dbURL)
	testkit.WaitFor(t, 90*time.Second, "every saga done", func() (bool, string) {
		var open, compensated int
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM drainer.runs WHERE saga_state <> 'done'),
		        (SELECT count(*) FROM drainer.outbox WHERE status = 'compensated')`).Scan(&open, &compensated); err != nil {
			t.Fatal(err)
		}
		return open == 0 && compensated == 2*runs, fmt.Sprintf("%d open sagas, %d compensated; rows %v", open, compensated, statusCounts(t, pool))
	})
	second.signal(syscall.SIGTERM)
	if code := second.exitCode(20 * time.Second); code != 0 {
		t.Fatalf("second daemon exited %d", code)
	}

	for i := range runs {
		run := fmt.Sprintf("order-%02d", i)
		for _, c := range []struct{ step, tool string }{{"1", "refund_card"}, {"2", "release_stock"}} {
			key := idemkey.Tuple{AgentRunID: run, StepID: c.step, ToolName: c.tool, BusinessScope: "order"}.Key()
			if n := p.Effects(key); n != 1 {
				t.Errorf("%s %s: %d effects at the provider, want exactly 1", run, c.tool, n)
			}
		}
	}
	if d := p.DuplicateEffects(); len(d) > 0 {
		t.Fatalf("duplicate effects: %v", d)
	}
	var wrongOrder int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM drainer.outbox r JOIN drainer.outbox s
	        ON r.agent_run_id = s.agent_run_id AND r.tool_name = 'refund_card' AND s.tool_name = 'release_stock'
	     WHERE r.seq < s.seq`).Scan(&wrongOrder)
	if err != nil || wrongOrder != 0 {
		t.Fatalf("%d runs had refund_card created before release_stock (%v): compensations must run in reverse order", wrongOrder, err)
	}
	var failedSteps int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM drainer.outbox WHERE tool_name = 'ship_order' AND status = 'failed'").Scan(&failedSteps); err != nil || failedSteps != runs {
		t.Fatalf("failed ship_order rows %d (%v)", failedSteps, err)
	}
}
