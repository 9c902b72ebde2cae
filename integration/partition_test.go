//go:build integration

package integration

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/tooling/mockprovider"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// TestRetryAfterSurvivesPartition: a replica's request is answered 503 with
// Retry-After, and the replica is cut off from Postgres (toxiproxy drops
// every byte both ways) before it can write the answer. Its lease expires
// and another replica reclaims the row. The provider must not be asked
// again before the Retry-After it gave has passed: nobody could record that
// answer, so the route says how long such a lost answer may ask for
// (reclaim_hold, here ten minutes) and the reclaim holds the row that long
// past its lease expiry; once the partition heals the cut-off replica
// writes its answer over the reclaimed row, whose floor becomes the
// provider's own, so the row then drains within the test's bounds rather
// than after the ten minutes.
func TestRetryAfterSurvivesPartition(t *testing.T) {
	t.Parallel()
	const retryAfter = 30 * time.Second
	dbURL, pool := newMigratedDB(t)
	du, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	pgProxy := chaosProxy(t, "postgres-a", du.Host)
	du.Host = pgProxy.Listen
	viaProxy := du.String()

	var (
		mu       sync.Mutex
		requests []time.Time
		answered time.Time // when the 503 was given
	)
	cut := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests = append(requests, time.Now())
		first := len(requests) == 1
		mu.Unlock()
		if first {
			// Cut the replica off from Postgres, then answer: it holds an
			// answer it cannot write.
			// (From the handler's goroutine: errors are reported, not fatal.)
			for _, dir := range []string{"upstream", "downstream"} {
				js := fmt.Sprintf(`{"name":"cut-%s","type":"timeout","stream":%q,"toxicity":1,"attributes":{"timeout":0}}`, dir, dir)
				if _, err := pgProxy.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
					t.Errorf("cut replica-a off: %v", err)
				}
			}
			close(cut)
			mu.Lock()
			answered = time.Now()
			mu.Unlock()
			w.Header().Set("Retry-After", fmt.Sprint(int(retryAfter.Seconds())))
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(srv.Close)

	cfg := fmt.Sprintf(`workers: 4
lease: 7s
adapters:
  provider:
    type: http
    url: %s/{tool_name}
    timeout: 1s
routes:
  charge_card:
    adapter: provider
    class: key_idempotent
    backoff: {base: 50ms, cap: 500ms, max_retry_after: 10m}
    reclaim_hold: 10m
`, srv.URL)
	cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", cfg)
	key := enqueueOne(t, pool, idemkey.Tuple{AgentRunID: "run-p", StepID: "s1", ToolName: "charge_card"}, `{"amount": 1}`)

	a := startDaemon(t, "replica-a", "--config", cfgPath, "--database-url", viaProxy, "--shutdown-timeout", "5s")
	select {
	case <-cut:
	case <-time.After(60 * time.Second):
		t.Fatalf("replica-a never sent the row\noutput:\n%s", tail(a.stderr.String(), 3000))
	}
	b := startDaemon(t, "replica-b", "--config", cfgPath, "--database-url", dbURL, "--shutdown-timeout", "5s")

	// replica-b takes the row back once replica-a's lease expired.
	testkit.WaitFor(t, 90*time.Second, "replica-b to reclaim the row", func() (bool, string) {
		b.requireRunning()
		r := readRow(t, pool, key)
		reclaimed := r.Status == "pending" && r.LastError != nil && strings.Contains(*r.LastError, "lease of")
		// (Or sent again already: the check below says when.)
		return reclaimed || r.Status == "succeeded", fmt.Sprintf("status %s, last_error %v", r.Status, strOrNil(r.LastError))
	})
	// The partition heals: replica-a writes the answer it held.
	chaosUntoxic(t, pgProxy, "cut-upstream")
	chaosUntoxic(t, pgProxy, "cut-downstream")

	testkit.WaitFor(t, 3*time.Minute, "the row to drain", func() (bool, string) {
		a.requireRunning()
		b.requireRunning()
		r := readRow(t, pool, key)
		return r.Status == "succeeded", fmt.Sprintf("status %s, attempts %d, last_error %v", r.Status, r.Attempts, strOrNil(r.LastError))
	})
	mu.Lock()
	got, floor := append([]time.Time(nil), requests...), answered.Add(retryAfter)
	mu.Unlock()
	t.Logf("the 503 at %s; the retry %s later (Retry-After %s)", floor.Add(-retryAfter).Format("15:04:05.000"),
		got[len(got)-1].Sub(floor.Add(-retryAfter)).Round(time.Millisecond), retryAfter)
	if len(got) != 2 {
		t.Fatalf("provider got %d requests, want 2 (the 503 and the retry)", len(got))
	}
	if early := floor.Sub(got[1]); early > mockprovider.RetryAfterTolerance {
		t.Fatalf("the retry came %s before the provider's Retry-After (%s) had passed", early.Round(time.Millisecond), retryAfter)
	}
	if r := readRow(t, pool, key); r.Attempts != 2 {
		t.Errorf("row drained with %d attempts, want 2", r.Attempts)
	}
	for _, d := range []*daemon{a, b} {
		d.signal(syscall.SIGTERM)
	}
	for _, d := range []*daemon{a, b} {
		if code := d.exitCode(60 * time.Second); code != 0 {
			t.Errorf("%s exited %d after SIGTERM, want 0", d.name, code)
		}
	}
}
