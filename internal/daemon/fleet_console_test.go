package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/tooling/pgtemp"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// migratedDatabases starts a throwaway cluster holding the databases
// names, each migrated.
func migratedDatabases(t *testing.T, names ...string) *pgtemp.Cluster {
	t.Helper()
	ctx := t.Context()
	c, err := pgtemp.Start(ctx, pgtemp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	for _, db := range names {
		createMigrated(t, c, db)
	}
	return c
}

// fleetStats is what the test reads of the console's /api/v1/stats.
type fleetStats struct {
	Adapters []struct {
		Database, Adapter, Reason string
		Ready                     bool
	} `json:"adapters"`
	DispatchRates map[string]float64 `json:"dispatch_rates"`
	DrainedHere   *bool              `json:"drained_here"`
	UnroutedTools []string           `json:"unrouted_tools"`
}

// TestFleetConsoleEngines: the console of a fleet shows, for one database,
// the breakers of its engine on this replica (payments' open in tenant-a,
// whose provider fails, and closed in tenant-b) and that database's
// dispatch rates only, flags the tools the loaded config does not route,
// and refuses a pause naming an adapter the config does not know.
func TestFleetConsoleEngines(t *testing.T) {
	t.Parallel()
	c := migratedDatabases(t, "tenant-a", "tenant-b")
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer provider.Close()
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("fleet-console-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	yaml := fmt.Sprintf(`adapters:
  payments: {type: http, url: "%s/{tool_name}", timeout: 2s, breaker: {consecutive_failures: 2, open_for: 1s}}
routes:
  charge: {adapter: payments, max_attempts: 1000, backoff: {base: 50ms, cap: 200ms}}
lease: 9s
console:
  actions: true
  token: ${file:%s}
databases:
  static:
    - {name: tenant-a, url: "%s"}
    - {name: tenant-b, url: "%s"}
  refresh: 1s
`, provider.URL, token, c.URL("tenant-a"), c.URL("tenant-b"))
	cfg, err := config.Parse("c.yaml", []byte(yaml), config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var logs testkit.Buffer
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(rctx, Options{Config: cfg, MetricsAddr: "127.0.0.1:0", Registry: prometheus.NewRegistry(), Version: "test",
			ConsoleAddr: "127.0.0.1:0", ConsoleSampleEvery: 200 * time.Millisecond,
			Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	}()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("run did not stop")
		}
	}()
	conn, err := pgx.Connect(t.Context(), c.URL("tenant-a"))
	if err != nil {
		t.Fatal(err)
	}
	for i, tool := range []string{"charge", "charge", "charge", "nobody"} {
		if _, err := conn.Exec(t.Context(), "SELECT drainer.enqueue('run-a', $1, $2, '', '{}')", fmt.Sprint("s", i), tool); err != nil {
			t.Fatal(err)
		}
	}
	_ = conn.Close(context.Background())

	var addr string
	deadline := time.Now().Add(60 * time.Second)
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	stats := func(db string) (fleetStats, string) {
		t.Helper()
		var st fleetStats
		code, body := get("/api/v1/stats?database=" + db)
		if code == http.StatusOK {
			_ = json.Unmarshal([]byte(body), &st)
		}
		return st, body
	}
	for addr == "" {
		if m := regexp.MustCompile(`"console_addr":"([^"]+)"`).FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("no console address logged; logs:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Tenant-a's breaker opens; tenant-b's stays closed, and tenant-b,
	// which sends nothing, shows no rate while tenant-a's engine turns its
	// rows away.
	breakerOpen, turnedAway, bSending := false, 0, false
	for !breakerOpen || turnedAway < 3 || !bSending {
		a, body := stats("tenant-a")
		b, bodyB := stats("tenant-b")
		for _, x := range a.Adapters {
			if x.Database == "tenant-a" && x.Adapter == "payments" && !x.Ready && strings.HasPrefix(x.Reason, "circuit breaker") {
				breakerOpen = true
			}
		}
		if a.DispatchRates["breaker_open"] > 0 {
			turnedAway++
		}
		for _, x := range b.Adapters {
			if x.Database != "tenant-b" || x.Adapter != "payments" || !x.Ready {
				t.Fatalf("tenant-b: %s, want payments sending", bodyB)
			}
			bSending = b.DrainedHere != nil && *b.DrainedHere
		}
		for k, v := range b.DispatchRates {
			if v > 0 {
				t.Fatalf("tenant-b, which holds no row, has a rate of %s: %s", k, bodyB)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("tenant-a: breaker open %v, turned away in %d samples: %s; tenant-b sending %v: %s", breakerOpen, turnedAway, body, bSending, bodyB)
		}
		time.Sleep(100 * time.Millisecond)
	}

	if a, body := stats("tenant-a"); !slices.Contains(a.UnroutedTools, "nobody") {
		t.Errorf("tenant-a: unrouted tools %v, want nobody: %s", a.UnroutedTools, body)
	}

	// A pause of an adapter the config does not name is refused.
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/api/v1/actions/pause",
		strings.NewReader(`{"target":"adapter","name":"paymnts","database":"tenant-a"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer fleet-console-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `did you mean \"payments\"`) {
		t.Errorf("pause of adapter paymnts: %d %s, want 400 naming payments", resp.StatusCode, body)
	}
	if _, body := get("/api/v1/pauses"); strings.TrimSpace(body) != "[]" {
		t.Errorf("pauses after the refusal: %s, want none", body)
	}
}

// TestEngineAdapters: each engine's breakers, holds and readiness are read
// from its metrics, by the database label, for the databases drained here
// only, with the engine's reasons.
func TestEngineAdapters(t *testing.T) {
	reg := prometheus.NewRegistry()
	ready := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "drainer_adapter_ready"}, []string{"database", "adapter"})
	hold := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "drainer_hold_seconds"}, []string{"database", "adapter", "route"})
	breaker := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "drainer_circuit_breaker_state"}, []string{"database", "adapter"})
	reg.MustRegister(ready, hold, breaker)
	ready.WithLabelValues("a", "payments").Set(0)
	breaker.WithLabelValues("a", "payments").Set(breakerOpen)
	ready.WithLabelValues("a", "mail").Set(0)
	hold.WithLabelValues("a", "mail", "*").Set(30)
	hold.WithLabelValues("a", "mail", "send").Set(0)
	ready.WithLabelValues("a", "kafka").Set(0)
	ready.WithLabelValues("b", "payments").Set(1)
	ready.WithLabelValues("c", "payments").Set(0) // not drained here
	now := time.Now()
	got := engineAdapters(reg, []string{"a", "b", "d"}, func(a string) string {
		if a == "kafka" {
			return "connecting: the server does not answer"
		}
		return ""
	}, now)
	want := map[string][]string{
		"a": {"kafka: connecting: the server does not answer", "mail: credentials refused on several routes (auth hold) [*]",
			"payments: circuit breaker open"},
		"b": {"payments: "},
		"d": {},
	}
	if len(got) != len(want) {
		t.Fatalf("databases %v, want %v", got, want)
	}
	for db, w := range want {
		var g []string
		for _, st := range got[db] {
			s := st.Adapter + ": " + st.Reason
			if len(st.Holds) > 0 {
				s += fmt.Sprintf(" %v", []string{st.Holds[0].Route})
				if d := now.Sub(st.Holds[0].Since); d != 30*time.Second {
					t.Errorf("%s %s held for %s, want 30s", db, st.Adapter, d)
				}
			}
			g = append(g, s)
		}
		if !slices.Equal(g, w) && (len(g) != 0 || len(w) != 0) {
			t.Errorf("%s: %q, want %q", db, g, w)
		}
	}
}
