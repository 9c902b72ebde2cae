package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/tooling/pgtemp"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// downURL is a database nobody answers for, with a password that must
// never reach a log line.
const downURL = "postgres://drainer:hunter2@127.0.0.1:1/x?sslmode=disable&connect_timeout=1"

// TestRunFleetCoordinationUnreachable: `drainer run` with databases:
// whose coordination database does not answer at startup (the first
// static database by name, or the catalog of databases.query) drains the
// reachable static database all the same, as a fleet of one, and is
// ready meanwhile; its logs name the coordination database, never its
// url, and a static one's failures count under its name.
func TestRunFleetCoordinationUnreachable(t *testing.T) {
	t.Parallel()
	c, err := pgtemp.Start(t.Context(), pgtemp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	down := filepath.Join(t.TempDir(), "down.url")
	if err := os.WriteFile(down, []byte(downURL), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, databases, coordination string }{
		{"static", fmt.Sprintf(`
  static:
    - {name: b-good, url: "%s"}
    - {name: a-down, url: "${file:%s}"}`, c.URL("b_static"), down), "a-down"},
		{"catalog", fmt.Sprintf(`
  static:
    - {name: b-good, url: "%s"}
  query: {url: "${file:%s}", sql: "SELECT name, url FROM tenants"}`, c.URL("b_catalog"), down), catalogCoordination},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := "b_" + tc.name
			createMigrated(t, c, db)
			drainsWithCoordinationDown(t, c.URL(db), tc.databases, tc.coordination)
		})
	}
}

// drainsWithCoordinationDown runs the daemon with the databases: section
// given, enqueues rows in the reachable database at url and checks that
// they are sent, /readyz, the logs and the metrics.
func drainsWithCoordinationDown(t *testing.T, url, databases, coordination string) {
	var mu sync.Mutex
	seen := map[string]int{}
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("Idempotency-Key")]++
		mu.Unlock()
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	defer provider.Close()
	yaml := fmt.Sprintf("adapters:\n  p: {type: http, url: \"%s/{tool_name}\", timeout: 2s}\nroutes:\n  t: {adapter: p}\nlease: 9s\ndatabases:%s\n  refresh: 1s\n",
		provider.URL, databases)
	cfg, err := config.Parse("c.yaml", []byte(yaml), config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var logs testkit.Buffer
	reg := prometheus.NewRegistry()
	stop := runInBackground(t, Options{Config: cfg, MetricsAddr: "127.0.0.1:0", Registry: reg, Version: "test",
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	defer stop()

	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for i := range 5 {
		var key string
		if err := conn.QueryRow(t.Context(), "SELECT key FROM drainer.enqueue('run-1', $1, 't', '', '{}')", fmt.Sprint("s", i)).Scan(&key); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
	}
	_ = conn.Close(context.Background())
	testkit.WaitFor(t, 3*time.Minute, "the reachable database's rows sent", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) >= len(keys), fmt.Sprintf("%d of %d sent; logs:\n%s", len(seen), len(keys), logs.String())
	})
	m := regexp.MustCompile(`"metrics_addr":"([^"]+)"`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no metrics address logged; logs:\n%s", logs.String())
	}
	testkit.WaitFor(t, time.Minute, "/readyz 200 while the replica drains alone", func() (bool, string) {
		resp, err := http.Get("http://" + m[1] + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Sprint(resp.StatusCode, " ", string(body))
	})
	testkit.WaitFor(t, time.Minute, "a membership failure naming the coordination database", func() (bool, string) {
		return strings.Contains(logs.String(), `"coordination_database":"`+coordination+`"`) &&
			strings.Contains(logs.String(), "fleet of one"), ""
	})
	if coordination != catalogCoordination {
		if n := fleetErrors(t, reg, coordination); n == 0 {
			t.Errorf("drainer_fleet_database_errors_total{database=%q} is 0", coordination)
		}
	}
	if strings.Contains(logs.String(), "hunter2") {
		t.Errorf("the unreachable database's password reached the logs:\n%s", logs.String())
	}
}

// fleetErrors sums drainer_fleet_database_errors_total for database.
func fleetErrors(t *testing.T, reg *prometheus.Registry, database string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != "drainer_fleet_database_errors_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "database" && l.GetValue() == database {
					sum += s.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// runInBackground runs the daemon until the returned stop, which checks
// that it stopped without error.
func runInBackground(t *testing.T, opts Options) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, opts) }()
	return func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("run did not stop")
		}
	}
}

// createMigrated creates database db in c and migrates it.
func createMigrated(t *testing.T, c *pgtemp.Cluster, db string) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(t.Context(), "CREATE DATABASE "+pgx.Identifier{db}.Sanitize())
	_ = conn.Close(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if conn, err = pgx.Connect(t.Context(), c.URL(db)); err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := migrations.Migrate(t.Context(), conn, migrations.DefaultSchema, nil); err != nil {
		t.Fatal(err)
	}
}
