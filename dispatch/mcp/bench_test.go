package mcp_test

import (
	"context"
	"testing"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
)

// BenchmarkDispatch measures tools/call dispatches against a local MCP server
// built with the SDK, from parallel goroutines sharing one adapter (one session).
func BenchmarkDispatch(b *testing.B) {
	ts := newToolServerTB(b)
	a := newAdapterTB(b, ts.srv.URL)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m := dispatchtest.NewMessage("charge", `{"amount":1}`)
			if r := a.Dispatch(context.Background(), m); r.Outcome != dispatch.Success {
				b.Errorf("outcome %s: %v", r.Outcome, r.Err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "dispatches/s")
}
