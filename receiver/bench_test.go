package receiver_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/receiver"
)

// BenchmarkOverhead measures what the receiver adds to a request with a
// fresh key (claim + completion: two short transactions) and to a replay
// (one), against the same handler unwrapped, over real loopback HTTP with
// keep-alive. It reports p50 and p99 latencies; it asserts nothing about
// speed.
func BenchmarkOverhead(b *testing.B) {
	pool := newPoolB(b)
	rc, err := receiver.New(pool, receiver.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := rc.Migrate(b.Context()); err != nil {
		b.Fatal(err)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":1,"status":"created"}`))
	})
	bare := httptest.NewServer(handler)
	defer bare.Close()
	wrapped := httptest.NewServer(rc.Wrap(handler))
	defer wrapped.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer client.CloseIdleConnections()

	var seq atomic.Int64
	send := func(url, key string, want int) time.Duration {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/orders", strings.NewReader(`{"sku":"A","qty":1}`))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set(receiver.DefaultKeyHeader, key)
		}
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		d := time.Since(start)
		if resp.StatusCode != want {
			b.Fatalf("status %d, want %d", resp.StatusCode, want)
		}
		return d
	}
	var bareD, firstD, replayD []time.Duration
	b.ResetTimer()
	for b.Loop() {
		key := fmt.Sprintf("bench-%d", seq.Add(1))
		bareD = append(bareD, send(bare.URL, "", http.StatusCreated))
		firstD = append(firstD, send(wrapped.URL, key, http.StatusCreated))
		replayD = append(replayD, send(wrapped.URL, key, http.StatusOK))
	}
	b.StopTimer()
	pct := func(ds []time.Duration, p float64) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[min(len(s)-1, int(float64(len(s))*p))].Microseconds())
	}
	b.ReportMetric(pct(bareD, 0.50), "bare-p50-µs")
	b.ReportMetric(pct(bareD, 0.99), "bare-p99-µs")
	b.ReportMetric(pct(firstD, 0.50), "first-p50-µs")
	b.ReportMetric(pct(firstD, 0.99), "first-p99-µs")
	b.ReportMetric(pct(replayD, 0.50), "replay-p50-µs")
	b.ReportMetric(pct(replayD, 0.99), "replay-p99-µs")
}
