package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/tooling/pgtemp"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
)

// TestRunFleetOneCatalogConnection: with a catalog query, the catalog
// database is also the coordination database. A replica holds at most one
// connection to it, whatever it is doing: the heartbeat, the backlog
// publication and the catalog query share it. Sampled in pg_stat_activity
// throughout, from the start until the catalog has been read several
// times and both tenants' rows are drained.
func TestRunFleetOneCatalogConnection(t *testing.T) {
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
	admin := func(db, sql string, args ...any) {
		t.Helper()
		conn, err := pgx.Connect(ctx, c.URL(db))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	tenants := []string{"tenant-a", "tenant-b"}
	admin("postgres", "CREATE DATABASE catalog")
	for _, db := range tenants {
		admin("postgres", "CREATE DATABASE "+pgx.Identifier{db}.Sanitize())
		conn, err := pgx.Connect(ctx, c.URL(db))
		if err != nil {
			t.Fatal(err)
		}
		_, err = migrations.Migrate(ctx, conn, migrations.DefaultSchema, nil)
		_ = conn.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
	}
	// Each read of the catalog takes a number from a sequence, so the test
	// knows how often the replica has read it.
	admin("catalog", `CREATE TABLE tenants (name text PRIMARY KEY, url text NOT NULL);
CREATE SEQUENCE reads;
CREATE FUNCTION tenants_read() RETURNS SETOF tenants LANGUAGE sql VOLATILE AS $$
	SELECT nextval('reads'); SELECT * FROM tenants ORDER BY name $$`)
	for _, db := range tenants {
		admin("catalog", "INSERT INTO tenants VALUES ($1, $2)", db, c.URL(db))
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
  query:
    url: "%s"
    sql: SELECT name, url FROM tenants_read()
  refresh: 200ms
`, provider.URL, c.URL("catalog"))
	cfg, err := config.Parse("c.yaml", []byte(yaml), config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}

	watch, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(context.Background())
	// The sequence is read in the catalog database.
	catalogConn, err := pgx.Connect(ctx, c.URL("catalog"))
	if err != nil {
		t.Fatal(err)
	}
	defer catalogConn.Close(context.Background())
	reads := func() int64 {
		var n *int64
		if err := catalogConn.QueryRow(ctx, `SELECT last_value FROM pg_sequences WHERE sequencename = 'reads'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == nil {
			return 0
		}
		return *n
	}
	// The replica's connections to the catalog database (the watchers'
	// own are told apart by their pid).
	catalogConns := func() int {
		var n int
		if err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = 'catalog' AND pid <> $1`,
			catalogConn.PgConn().PID()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	var logs testkit.Buffer
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(rctx, Options{Config: cfg, MetricsAddr: "127.0.0.1:0", Version: "test",
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
	for _, db := range tenants {
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

	most, samples := 0, 0
	deadline := time.Now().Add(90 * time.Second)
	for {
		n := catalogConns()
		most, samples = max(most, n), samples+1
		mu.Lock()
		drained := len(seen) >= len(keys)
		mu.Unlock()
		if drained && reads() >= 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d samples: %d of %d rows sent, the catalog read %d times; logs:\n%s", samples, len(seen), len(keys), reads(), logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("catalog read %d times; at most %d connections to the catalog database over %d samples", reads(), most, samples)
	if most != 1 {
		t.Errorf("the replica held up to %d connections to the catalog database, want exactly one (the coordination connection, shared with the catalog query)", most)
	}
	mu.Lock()
	for _, k := range keys {
		if seen[k] != 1 {
			t.Errorf("key %s sent %d times", k, seen[k])
		}
	}
	mu.Unlock()
}
