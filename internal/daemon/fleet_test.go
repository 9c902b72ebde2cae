package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/tooling/pgtemp"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// TestRunFleet: `drainer run` with databases: drains every listed database
// through one set of adapters; its logs name the databases, never their
// urls, and its engine metrics carry the database label; its console
// shows every database's counts.
func TestRunFleet(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c, err := pgtemp.Start(ctx, pgtemp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	}()
	dbs := []string{"tenant-a", "tenant-b"}
	for _, db := range dbs {
		createMigrated(t, c, db)
	}
	// tenant-b's intents are never vacuumed: its engine's start says so,
	// naming the database; tenant-a's says nothing.
	if conn, err := pgx.Connect(ctx, c.URL("tenant-b")); err != nil {
		t.Fatal(err)
	} else {
		_, err = conn.Exec(ctx, `ALTER TABLE drainer.intents SET (autovacuum_enabled = false)`)
		_ = conn.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	seen := map[string]int{}
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("Idempotency-Key")]++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	defer provider.Close()
	yaml := fmt.Sprintf(`adapters:
  p: {type: http, url: "%s/{tool_name}", timeout: 2s}
routes:
  t: {adapter: p}
lease: 9s
databases:
  static:
    - {name: tenant-b, url: "%s"}
    - {name: tenant-a, url: "%s"}
  refresh: 1s
`, provider.URL, c.URL("tenant-b"), c.URL("tenant-a"))
	cfg, err := config.Parse("c.yaml", []byte(yaml), config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var logs testkit.Buffer
	reg := prometheus.NewRegistry()
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(rctx, Options{Config: cfg, MetricsAddr: "127.0.0.1:0", Registry: reg, Version: "test",
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

	var keys []string
	for _, db := range dbs {
		conn, err := pgx.Connect(ctx, c.URL(db))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			var key string
			if err := conn.QueryRow(ctx, "SELECT key FROM drainer.enqueue($1, $2, 't', '', '{}')", "run-"+db, fmt.Sprint("s", i)).Scan(&key); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, key)
		}
		_ = conn.Close(ctx)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n >= len(keys) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d rows dispatched; logs:\n%s", n, len(keys), logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	for _, k := range keys {
		if seen[k] != 1 {
			t.Errorf("key %s sent %d times", k, seen[k])
		}
	}
	mu.Unlock()
	var vacuumWarnings []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "autovacuum is off for tables") {
			vacuumWarnings = append(vacuumWarnings, line)
		}
	}
	if len(vacuumWarnings) != 1 || !strings.Contains(vacuumWarnings[0], `"database":"tenant-b"`) ||
		!strings.Contains(vacuumWarnings[0], `"tables":"intents"`) {
		t.Errorf("want one autovacuum warning, naming tenant-b and intents; got %q", vacuumWarnings)
	}

	// The console shows both databases' counts, published by the fleet.
	m := regexp.MustCompile(`"console_addr":"([^"]+)"`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no console address logged; logs:\n%s", logs.String())
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		var st struct {
			RowsByDatabase []struct {
				Name         string           `json:"name"`
				RowsByStatus map[string]int64 `json:"rows_by_status"`
			} `json:"rows_by_database"`
		}
		body := ""
		if resp, err := http.Get("http://" + m[1] + "/api/v1/stats"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			_ = json.Unmarshal(b, &st)
		}
		got := map[string]int64{}
		for _, d := range st.RowsByDatabase {
			got[d.Name] = d.RowsByStatus["succeeded"]
		}
		if len(got) == 2 && got["tenant-a"] == 5 && got["tenant-b"] == 5 {
			for _, db := range dbs {
				if strings.Contains(body, c.URL(db)) {
					t.Errorf("the url of %s reached the console", db)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("console stats: %s, want 5 succeeded in each database", body)
		}
		time.Sleep(100 * time.Millisecond)
	}

	out := logs.String()
	for _, db := range dbs {
		if !strings.Contains(out, `"database":"`+db+`"`) {
			t.Errorf("no log names database %s", db)
		}
		if strings.Contains(out, c.URL(db)) {
			t.Errorf("the url of %s reached the logs", db)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var labelled []string
	for _, mf := range mfs {
		if mf.GetName() != "drainer_dispatch_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "database" && !slices.Contains(labelled, l.GetValue()) {
					labelled = append(labelled, l.GetValue())
				}
			}
		}
	}
	slices.Sort(labelled)
	if !slices.Equal(labelled, dbs) {
		t.Errorf("drainer_dispatch_total database labels %v, want %v", labelled, dbs)
	}
}
