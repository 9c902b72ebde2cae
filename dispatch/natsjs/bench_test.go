package natsjs

import (
	"runtime"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
)

// BenchmarkDispatch publishes one message per dispatch to a file-backed
// stream on the test server, one caller at a time and from 16 concurrent
// callers (the default worker count), and reports dispatches/s.
func BenchmarkDispatch(b *testing.B) {
	for _, bc := range []struct {
		name    string
		callers int
	}{{"serial", 1}, {"parallel16", 16}} {
		b.Run(bc.name, func(b *testing.B) {
			e := newNATSEnv(b, sharedServer(b))
			subject := e.prefix + ".intents"
			e.createStream(b, streamSpec{subjects: []string{subject}, file: true})
			a := newAdapter(b, Config{Servers: []string{e.url}, Subject: subject})
			dispatchOne := func() bool {
				r := a.Dispatch(b.Context(), dispatchtest.NewMessage("charge_card", testPayload))
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
