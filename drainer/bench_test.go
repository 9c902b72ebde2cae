package drainer

import (
	"context"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
)

// BenchmarkDrain measures the whole drain path (claim, no-op dispatch,
// batched completion, audit) on a real Postgres: b.N rows per run.
func BenchmarkDrain(b *testing.B) {
	for _, audit := range []bool{true, false} {
		name := "audit=on"
		if !audit {
			name = "audit=off"
		}
		b.Run(name, func(b *testing.B) {
			pool := newPool(b)
			if !audit {
				if _, err := pool.Exec(context.Background(), "ALTER TABLE drainer.queue DISABLE TRIGGER queue_audit_update, DISABLE TRIGGER queue_audit_insert"); err != nil {
					b.Fatal(err)
				}
			}
			n := max(b.N, 1000)
			for i := 0; i < n; i += 5000 {
				enqueueN(b, pool, "bench-"+itoa(i), "noop", min(5000, n-i))
			}
			noop := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
				return dispatch.Result{Outcome: dispatch.Success}
			})
			b.ResetTimer()
			start := time.Now()
			startEngine(b, pool, testRouting(b, map[string]dispatch.Adapter{"noop": noop}, &Route{Tool: "noop"}), Config{Workers: 64, BatchSize: 64})
			for {
				var left int
				if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM drainer.outbox WHERE status <> 'succeeded'").Scan(&left); err != nil {
					b.Fatal(err)
				}
				if left == 0 {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			b.ReportMetric(float64(n)/time.Since(start).Seconds(), "rows/s")
		})
	}
}

// BenchmarkSnapshot measures one backlog snapshot on a 10^6-row outbox
// (90% succeeded, 10% pending), as the closing figure of the snapshot cost.
func BenchmarkSnapshot(b *testing.B) {
	pool := newPool(b)
	ctx := context.Background()
	for _, q := range []string{
		"ALTER TABLE drainer.queue DISABLE TRIGGER USER",
		`INSERT INTO drainer.intents (key, agent_run_id, step_id, tool_name, business_scope, kind, payload, payload_hash)
		 SELECT 'k' || g, 'run-' || (g % 1000), 's' || g, 't', '', 'forward', '{}', '\x00'
		   FROM generate_series(1, 1000000) g`,
		`INSERT INTO drainer.queue (seq, tool_name, business_scope, kind, status)
		 SELECT seq, tool_name, business_scope, kind, CASE WHEN seq % 10 = 0 THEN 'pending' ELSE 'succeeded' END
		   FROM drainer.intents`,
		"ALTER TABLE drainer.queue ENABLE TRIGGER USER",
		"VACUUM ANALYZE drainer.queue",
		"VACUUM ANALYZE drainer.intents",
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	var cost float64
	for range b.N {
		if _, err := testStore.RefreshSnapshot(ctx, pool, 0, []string{"t"}); err != nil {
			b.Fatal(err)
		}
		s, _, err := testStore.ReadSnapshot(ctx, pool)
		if err != nil {
			b.Fatal(err)
		}
		cost = s.CostSeconds
		if s.RowsByStatus["pending"] != 100000 {
			b.Fatalf("pending %d", s.RowsByStatus["pending"])
		}
	}
	b.ReportMetric(cost*1000, "db-ms/snapshot")
}
