package webhook

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/idemkey"
)

// BenchmarkDispatch measures dispatches per second against a local
// provider that answers 200 with a small JSON body.
func BenchmarkDispatch(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"ok"}`))
	}))
	defer srv.Close()
	a, err := New(Config{URL: srv.URL + "/v1/{tool_name}", Timeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	var n atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			tup := idemkey.Tuple{AgentRunID: "bench", StepID: strconv.FormatInt(i, 10), ToolName: "charge_card"}
			res := a.Dispatch(context.Background(), &dispatch.Message{Key: tup.Key(), Tuple: tup, Payload: []byte(`{"amount":1}`), Attempt: 1})
			if res.Outcome != dispatch.Success {
				b.Errorf("outcome %v: %v", res.Outcome, res.Err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "dispatches/s")
}
