package pgtable

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
	"github.com/drainer-io/drainer/tooling/pgtemp"
)

const benchPayload = `{"amount":1250,"currency":"eur","metadata":{"order":"A-17"}}`

// BenchmarkDispatch measures rows/s through the adapter, 8 goroutines per
// CPU sharing its 16 connections, on the shared test server (fsync off: the
// adapter's own ceiling) and on a durable throwaway cluster (fsync on, as in
// production: every autocommitted insert waits for its WAL flush). "insert"
// dispatches new keys, "replay" one key again and again (conflict, then
// comparison: two statements).
func BenchmarkDispatch(b *testing.B) {
	b.Run("fsync=off", func(b *testing.B) {
		db := newTestDB(b)
		db.createTable(b, "effects")
		benchAdapter(b, db.newTestAdapter(b, nil))
	})
	b.Run("fsync=on", func(b *testing.B) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c, err := pgtemp.Start(ctx, pgtemp.Options{Durable: true})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Stop() })
		pool, err := pgxpool.New(ctx, c.URL("postgres"))
		if err != nil {
			b.Fatal(err)
		}
		_, err = pool.Exec(ctx, fmt.Sprintf(RecipientTableDDL, "effects"))
		pool.Close()
		if err != nil {
			b.Fatal(err)
		}
		a, err := New(ctx, Config{DSN: c.URL("postgres"), Table: "effects"})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { a.Close() })
		benchAdapter(b, a)
	})
}

func benchAdapter(b *testing.B, a *Adapter) {
	ctx := context.Background()
	b.Run("insert", func(b *testing.B) {
		b.SetParallelism(8)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if r := a.Dispatch(ctx, dispatchtest.NewMessage("charge_card", benchPayload)); r.Outcome != dispatch.Success {
					b.Errorf("dispatch: %s (%v)", r.Outcome, r.Err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("replay", func(b *testing.B) {
		m := dispatchtest.NewMessage("charge_card", benchPayload)
		if r := a.Dispatch(ctx, m); r.Outcome != dispatch.Success {
			b.Fatalf("dispatch: %s (%v)", r.Outcome, r.Err)
		}
		b.SetParallelism(8)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if r := a.Dispatch(ctx, m); r.Outcome != dispatch.Replay {
					b.Errorf("dispatch: %s (%v)", r.Outcome, r.Err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	})
}
