//go:build integration

package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/producer"
	"github.com/drainer-io/drainer/tooling/mockprovider"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestSIGTERMLeavesNoRowInFlight sends SIGTERM while every worker waits on a
// slow provider, with a shutdown timeout shorter than the calls: the daemon
// cuts them off, records each as a consumed attempt and exits 0 with no row
// left in_flight.
func TestSIGTERMLeavesNoRowInFlight(t *testing.T) {
	t.Parallel()
	dbURL, pool := newMigratedDB(t)

	const workers, rows = 8, 20
	var (
		mu   sync.Mutex
		seen = map[string]int{} // Idempotency-Key -> requests
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("Idempotency-Key")]++
		mu.Unlock()
		select {
		case <-time.After(3 * time.Second):
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"ok":true}`))
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	requests := func() (distinct, total int) {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range seen {
			total += n
		}
		return len(seen), total
	}

	cfg := fmt.Sprintf(`workers: %d
lease: 20s
adapters:
  slow:
    type: http
    url: %s/{tool_name}
    timeout: 10s
routes:
  charge_card:
    adapter: slow
    max_attempts: 5
`, workers, srv.URL)
	cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", cfg)

	var keys []string
	for i := range rows {
		keys = append(keys, enqueueOne(t, pool, idemkey.Tuple{
			AgentRunID: fmt.Sprintf("run-%d", i), StepID: "charge", ToolName: "charge_card", BusinessScope: "acct-1",
		}, fmt.Sprintf(`{"amount_cents": %d}`, 100+i)))
	}

	d := startDaemon(t, "drainer", "--config", cfgPath, "--database-url", dbURL, "--shutdown-timeout", "1s")
	testkit.WaitFor(t, 30*time.Second, "every worker to be waiting on the provider", func() (bool, string) {
		d.requireRunning()
		distinct, total := requests()
		return distinct >= workers, fmt.Sprintf("%d requests for %d keys", total, distinct)
	})
	if c := statusCounts(t, pool); c["in_flight"] != workers {
		t.Fatalf("before SIGTERM: %v, want %d in_flight", c, workers)
	}

	sentAt := time.Now()
	d.signal(syscall.SIGTERM)
	if code := d.exitCode(15 * time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0\noutput:\n%s", code, tail(d.stderr.String(), 4000))
	}
	t.Logf("exited 0 %s after SIGTERM (shutdown timeout 1s, calls take 3s)", time.Since(sentAt).Round(time.Millisecond))

	if c := statusCounts(t, pool); c["pending"] != rows {
		t.Errorf("after shutdown: %v, want all %d rows pending (none in_flight)", c, rows)
	}
	mu.Lock()
	sent := make(map[string]int, len(seen))
	for k, n := range seen {
		sent[k] = n
	}
	mu.Unlock()
	if len(sent) != workers {
		t.Errorf("provider saw %d keys, want %d (one per worker)", len(sent), workers)
	}
	for _, k := range keys {
		r := readRow(t, pool, k)
		lastErr := ""
		if r.LastError != nil {
			lastErr = *r.LastError
		}
		switch n := sent[k]; {
		case n > 1:
			t.Errorf("row %s was sent %d times", k, n)
		case n == 1:
			// Cut off after it was sent: back to pending, the attempt consumed.
			if r.Status != "pending" || r.Attempts != 1 || !strings.Contains(lastErr, "cut off") {
				t.Errorf("cut-off row %s: status %s, attempts %d, last_error %q; want pending, 1 attempt, last_error naming the cut-off",
					k, r.Status, r.Attempts, lastErr)
			}
		default:
			// Never claimed (or given back before sending): untouched.
			if r.Status != "pending" || r.Attempts != 0 {
				t.Errorf("unsent row %s: status %s, attempts %d; want pending with 0 attempts", k, r.Status, r.Attempts)
			}
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", tail(d.stderr.String(), 4000))
	}
}

// TestSIGHUPReload adds a route by SIGHUP: a row waiting without a route
// drains; a broken config is then refused and the running one kept.
func TestSIGHUPReload(t *testing.T) {
	t.Parallel()
	dbURL, pool := newMigratedDB(t)
	provider := mockprovider.New(mockprovider.Config{VerifyTuple: true})
	baseURL, err := provider.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(provider.Close)

	dir := t.TempDir()
	cfgPath := writeFile(t, dir, "drainer.yaml", httpConfig(baseURL, "", "charge_card"))
	d := startDaemon(t, "drainer", "--config", cfgPath, "--database-url", dbURL, "--shutdown-timeout", "5s")
	d.waitReady(30 * time.Second)

	// A row for a tool without a route waits, attempts untouched.
	late := enqueueOne(t, pool, idemkey.Tuple{AgentRunID: "run-1", StepID: "s1", ToolName: "late_tool"}, `{"n": 1}`)
	testkit.WaitFor(t, 20*time.Second, "the late_tool row to be looked at twice without a route", func() (bool, string) {
		d.requireRunning()
		n := d.metric("drainer_dispatch_total", `adapter=""`, `outcome="unrouted"`)
		return n >= 2, fmt.Sprintf("drainer_dispatch_total{adapter=\"\",outcome=\"unrouted\"} = %v", n)
	})
	// Between rechecks the row is pending with no attempt consumed (during a
	// recheck it is briefly in_flight, holding the attempt it then gives back).
	testkit.WaitFor(t, 10*time.Second, "the unrouted row pending between rechecks", func() (bool, string) {
		r := readRow(t, pool, late)
		ok := r.Status == "pending" && r.Attempts == 0 && r.LastError != nil && strings.Contains(*r.LastError, "late_tool")
		return ok, fmt.Sprintf("status %s, attempts %d, last_error %v", r.Status, r.Attempts, strOrNil(r.LastError))
	})
	if n := provider.Requests(); n != 0 {
		t.Fatalf("provider got %d requests for an unrouted row", n)
	}

	// Add the route and reload.
	writeFile(t, dir, "drainer.yaml", httpConfig(baseURL, "", "charge_card", "late_tool"))
	d.signal(syscall.SIGHUP)
	waitRowStatus(t, d, pool, late, "succeeded", 30*time.Second)
	if n := provider.Effects(late); n != 1 {
		t.Errorf("late_tool row: %d effects, want 1", n)
	}
	if r := readRow(t, pool, late); r.Attempts != 1 {
		t.Errorf("late_tool row drained with %d attempts, want 1 (unrouted looks consume none)", r.Attempts)
	}

	// A broken config is refused; the daemon keeps running on the old one.
	writeFile(t, dir, "drainer.yaml", "workers: many\nlease: [\n")
	d.signal(syscall.SIGHUP)
	testkit.WaitFor(t, 20*time.Second, "the reload to be refused", func() (bool, string) {
		d.requireRunning()
		out := d.stderr.String()
		return strings.Contains(out, "config reload refused"), tail(out, 1000)
	})
	if out := d.stderr.String(); !strings.Contains(out, cfgPath) {
		t.Errorf("the refused reload's log does not name the config file %s:\n%s", cfgPath, tail(out, 2000))
	}
	d.requireRunning()
	if code, body := d.get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz after a refused reload: %d %s", code, body)
	}
	later := enqueueOne(t, pool, idemkey.Tuple{AgentRunID: "run-2", StepID: "s1", ToolName: "late_tool"}, `{"n": 2}`)
	charge := enqueueOne(t, pool, idemkey.Tuple{AgentRunID: "run-2", StepID: "s2", ToolName: "charge_card"}, `{"n": 3}`)
	waitRowStatus(t, d, pool, later, "succeeded", 30*time.Second)
	waitRowStatus(t, d, pool, charge, "succeeded", 30*time.Second)

	d.signal(syscall.SIGTERM)
	if code := d.exitCode(15 * time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
}

// enqueueOne enqueues one intent with the Go producer and returns its key.
func enqueueOne(t *testing.T, pool *pgxpool.Pool, tuple idemkey.Tuple, payload string) string {
	t.Helper()
	ctx := context.Background()
	var key string
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		key, _, err = producer.EnqueueTx(ctx, tx, producer.Intent{Tuple: tuple, Payload: []byte(payload)})
		return err
	})
	if err != nil {
		t.Fatalf("enqueue %+v: %v", tuple, err)
	}
	return key
}

// waitRowStatus waits until the row has the given status while d runs.
func waitRowStatus(t *testing.T, d *daemon, pool *pgxpool.Pool, key, status string, timeout time.Duration) {
	t.Helper()
	testkit.WaitFor(t, timeout, "row "+key+" to be "+status, func() (bool, string) {
		d.requireRunning()
		r := readRow(t, pool, key)
		return r.Status == status, fmt.Sprintf("status %s, attempts %d, last_error %v", r.Status, r.Attempts, strOrNil(r.LastError))
	})
}

func strOrNil(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

// TestSIGTERMWhileStartingExitsZero sends SIGHUP then SIGTERM to `drainer
// run` while it is still starting, before any command code has run (a
// starved start is played with DRAINER_TEST_START_DELAY), and against a
// database that cannot be reached: both are caught from main's first
// statement, so the reload request is dropped (the config is read after it)
// and the daemon exits 0, having claimed nothing, and says why.
func TestSIGTERMWhileStartingExitsZero(t *testing.T) {
	t.Parallel()
	cfg := `workers: 2
lease: 10s
adapters:
  p: {type: http, url: "http://127.0.0.1:1/{tool_name}", timeout: 1s}
routes:
  t: {adapter: p}
`
	cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", cfg)
	unreachable := fmt.Sprintf("postgres://drainer@127.0.0.1:%d/none?connect_timeout=2", freePort(t))
	d := startDaemonEnv(t, "starting", []string{"DRAINER_TEST_START_DELAY=2s"},
		"--config", cfgPath, "--database-url", unreachable)
	testkit.WaitFor(t, 60*time.Second, "the process to be starting", func() (bool, string) {
		out := d.stderr.String()
		return strings.Contains(out, "test start delay"), tail(out, 500)
	})
	d.signal(syscall.SIGHUP)
	d.signal(syscall.SIGTERM)
	if code := d.exitCode(60 * time.Second); code != 0 {
		t.Fatalf("exit code %d after a SIGTERM during startup, want 0\noutput:\n%s", code, tail(d.stderr.String(), 3000))
	}
	out := d.stderr.String()
	for _, want := range []string{"shutdown signal received", "no row was claimed"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, tail(out, 3000))
		}
	}
}
