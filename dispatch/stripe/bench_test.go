package stripe

import (
	"context"
	"testing"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
)

// benchPayload is a typical customer creation: nested metadata, an array.
const benchPayload = `{"email":"jenny@example.com","name":"Jenny Rosen","metadata":{"order":"A-17","tier":"gold"},"preferred_locales":["fr","en"]}`

// BenchmarkDispatch measures rows/s through the adapter, 8 goroutines per
// CPU, each row a new key, against the in-process fake (the adapter's own
// cost) and against stripe-mock (which validates every request against
// Stripe's OpenAPI specification).
func BenchmarkDispatch(b *testing.B) {
	b.Run("fake", func(b *testing.B) {
		up := newFakeStripe(b)
		benchDispatch(b, newTestAdapter(b, up.srv.URL, nil))
	})
	b.Run("stripe-mock", func(b *testing.B) {
		benchDispatch(b, newTestAdapter(b, startStripeMock(b), nil))
	})
}

func benchDispatch(b *testing.B, a *Adapter) {
	ctx := context.Background()
	b.SetParallelism(8)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if r := a.Dispatch(ctx, dispatchtest.NewMessage("create_customer", benchPayload)); r.Outcome != dispatch.Success {
				b.Errorf("dispatch: %s (%v)", r.Outcome, r.Err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkFormEncode measures the payload to form conversion alone.
func BenchmarkFormEncode(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := FormEncode([]byte(benchPayload)); err != nil {
			b.Fatal(err)
		}
	}
}
