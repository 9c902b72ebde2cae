package kafka

import (
	"runtime"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/drainer-io/drainer/dispatch"
)

// BenchmarkDispatch produces one record per dispatch to an in-process
// broker, one caller at a time and from 64 concurrent callers, and reports
// dispatches/s.
func BenchmarkDispatch(b *testing.B) {
	for _, bc := range []struct {
		name    string
		callers int
	}{{"serial", 1}, {"parallel64", 64}} {
		b.Run(bc.name, func(b *testing.B) {
			c := newCluster(b, kfake.SeedTopics(8, "bench"))
			a := newAdapter(b, c, Config{Topic: "bench"})
			dispatchOne := func() bool {
				r := a.Dispatch(b.Context(), newMessage("create_order", "", `{"order_id":"o-1","amount":1250}`))
				if r.Outcome != dispatch.Success {
					b.Errorf("dispatch: %s (reason %q, err %v)", r.Outcome, r.Reason, r.Err)
				}
				return r.Outcome == dispatch.Success
			}
			b.ResetTimer()
			start := time.Now()
			if bc.callers == 1 {
				for i := 0; i < b.N && dispatchOne(); i++ {
				}
			} else {
				b.SetParallelism(max(1, bc.callers/runtime.GOMAXPROCS(0)))
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() && dispatchOne() {
					}
				})
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "dispatches/s")
		})
	}
}
