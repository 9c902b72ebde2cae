package execplugin

import (
	"log/slog"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
)

// BenchmarkDispatch measures deliveries through plugin-echo (one gRPC call
// and one appended line each): serially, and from many goroutines sharing
// the adapter as the engine's workers do.
func BenchmarkDispatch(b *testing.B) {
	for _, parallel := range []bool{false, true} {
		name := "serial"
		if parallel {
			name = "parallel"
		}
		b.Run(name, func(b *testing.B) {
			up := &echoUpstream{out: b.TempDir() + "/out.jsonl"}
			a, err := New(b.Context(), Config{
				Command: echoBin, Args: []string{"--out", up.out}, Logger: slog.New(slog.DiscardHandler),
			})
			if err != nil {
				b.Fatal(err)
			}
			defer a.Close()
			msgs := make([]*dispatch.Message, b.N)
			for i := range msgs {
				msgs[i] = dispatchtest.NewMessage("charge_card", testPayload)
			}
			var next chan *dispatch.Message
			if parallel {
				next = make(chan *dispatch.Message, len(msgs))
				for _, m := range msgs {
					next <- m
				}
				close(next)
			}
			b.ResetTimer()
			start := time.Now()
			if parallel {
				b.SetParallelism(8) // 8×GOMAXPROCS workers
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if r := a.Dispatch(b.Context(), <-next); r.Outcome != dispatch.Success {
							b.Errorf("%s: %v", r.Outcome, r.Err)
						}
					}
				})
			} else {
				for _, m := range msgs {
					if r := a.Dispatch(b.Context(), m); r.Outcome != dispatch.Success {
						b.Fatalf("%s: %v", r.Outcome, r.Err)
					}
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "dispatches/s")
		})
	}
}
