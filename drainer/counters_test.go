package drainer

import (
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestRetryTaxCounters: a retried enqueue (created = false) and a refused
// one (same tuple, other payload) are counted, even though the caller's
// transaction rolled back; a first enqueue is not.
func TestRetryTaxCounters(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := t.Context()
	metrics := NewMetrics(prometheus.NewRegistry(), "test")
	if _, err := pool.Exec(ctx, `SELECT drainer.enqueue('r', 's', 'unrouted_tool', '', '{"a":1}')`); err != nil {
		t.Fatal(err)
	}
	for _, payload := range []string{`{"a":1}`, `{"a":2}`} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec(ctx, `SELECT drainer.enqueue('r', 's', 'unrouted_tool', '', $1::jsonb)`, payload)
		if payload == `{"a":2}` && err == nil {
			t.Fatal("a different payload for the same tuple was accepted")
		}
		_ = tx.Rollback(ctx)
	}
	startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{}), Config{Metrics: metrics, SnapshotInterval: 50 * time.Millisecond})
	testkit.WaitFor(t, 30*time.Second, "counters exported", func() (bool, string) {
		return testutil.ToFloat64(metrics.EnqueueDuplicates) == 1 &&
			testutil.ToFloat64(metrics.EnqueueMismatches) == 1, ""
	})
}
