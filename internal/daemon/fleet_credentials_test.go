package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
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

// TestRunFleetCredentialsRotated: a database's url comes from a
// credentials file (${file:…}). The credentials are rotated: the file now
// names a new role, and the old role loses its login and its sessions. The
// fleet reads the file again at its next refresh and drains the database
// with the new credentials; no row is lost or sent twice, and neither url
// reaches the logs. The first rows are answered only once the old role's
// sessions are gone: their completions cannot be written with the old
// credentials, and the engine on the new ones writes them (the fleet hands
// them over) instead of sending the rows again.
func TestRunFleetCredentialsRotated(t *testing.T) {
	t.Parallel()
	credentialsRotated(t, true)
}

// TestRunCredentialsRotated: the same rotation under a replica draining
// the one database of database_url. Each new connection reads the url
// again (its user and password): the pool, the listener and the wake gate
// reconnect as the new role, the first rows' completions are written
// through the new connections, and no row is sent twice.
func TestRunCredentialsRotated(t *testing.T) {
	t.Parallel()
	credentialsRotated(t, false)
}

func credentialsRotated(t *testing.T, fleet bool) {
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
	admin := func(db, sql string) {
		t.Helper()
		conn, err := pgx.Connect(ctx, c.URL(db))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	admin("postgres", "CREATE DATABASE rotated")
	admin("postgres", "CREATE ROLE tenant_v1 LOGIN SUPERUSER")
	admin("postgres", "CREATE ROLE tenant_v2 LOGIN SUPERUSER")
	conn, err := pgx.Connect(ctx, c.URL("rotated"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Migrate(ctx, conn, migrations.DefaultSchema, nil); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)

	as := func(role string) string {
		u, err := url.Parse(c.URL("rotated"))
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.User(role)
		return u.String()
	}
	secret := filepath.Join(t.TempDir(), "rotated.url")
	if err := os.WriteFile(secret, []byte(as("tenant_v1")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	seen := map[string]int{}
	hold := make(chan struct{}) // closed once the old sessions are gone
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("Idempotency-Key")]++
		mu.Unlock()
		<-hold
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	defer provider.Close()
	released := false
	defer func() {
		if !released {
			close(hold)
		}
	}()
	yaml := fmt.Sprintf(`adapters:
  p: {type: http, url: "%s/{tool_name}", timeout: 6s}
routes:
  t: {adapter: p}
lease: 12s
`, provider.URL)
	if fleet {
		yaml += fmt.Sprintf(`databases:
  static:
    - {name: rotated, url: "${file:%s}"}
  refresh: 1s
`, secret)
	} else {
		yaml += fmt.Sprintf("database_url: \"${file:%s}\"\n", secret)
	}
	cfg, err := config.Parse("c.yaml", []byte(yaml), config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var logs testkit.Buffer
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(rctx, Options{Config: cfg, MetricsAddr: "127.0.0.1:0", Registry: prometheus.NewRegistry(),
			Version: "test", Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
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
	enqueue := func(batch string, n int) {
		t.Helper()
		conn, err := pgx.Connect(ctx, c.URL("rotated"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		for i := range n {
			var key string
			if err := conn.QueryRow(ctx, "SELECT key FROM drainer.enqueue($1, $2, 't', '', '{}')", "run-"+batch, fmt.Sprint("s", i)).Scan(&key); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, key)
		}
	}
	// sessions counts the fleet's sessions on the database as role.
	sessions := func(role string) int {
		t.Helper()
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = 'rotated' AND usename = $1", role).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitDispatched := func(what string) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			mu.Lock()
			n := len(seen)
			mu.Unlock()
			if n >= len(keys) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d of %d rows dispatched; logs:\n%s", what, n, len(keys), logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	enqueue("before", 10)
	waitDispatched("with the first credentials")
	if n := sessions("tenant_v1"); n == 0 {
		t.Fatalf("no session as tenant_v1 while draining with it")
	}

	// The rotation: the file names the new role; the old one can no longer
	// log in and its sessions end.
	if err := os.WriteFile(secret, []byte(as("tenant_v2")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	admin("postgres", "ALTER ROLE tenant_v1 NOLOGIN")
	admin("postgres", "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'tenant_v1'")
	close(hold)
	released = true
	enqueue("after", 10)
	waitDispatched("with the rotated credentials")
	deadline := time.Now().Add(60 * time.Second)
	for sessions("tenant_v2") == 0 || sessions("tenant_v1") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("sessions as tenant_v2: %d, as tenant_v1: %d; logs:\n%s", sessions("tenant_v2"), sessions("tenant_v1"), logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Every row settles with its first attempt's answer.
	check, err := pgx.Connect(ctx, c.URL("rotated"))
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close(context.Background())
	for {
		var settled, firstAttempt int
		if err := check.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE status = 'succeeded' AND attempts = 1)
			FROM drainer.outbox WHERE key = ANY($1)`, keys).Scan(&settled, &firstAttempt); err != nil {
			t.Fatal(err)
		}
		if settled == len(keys) {
			if firstAttempt != len(keys) {
				t.Errorf("%d of %d rows succeeded on a later attempt: sent again", len(keys)-firstAttempt, len(keys))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d rows succeeded; logs:\n%s", settled, len(keys), logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	for _, k := range keys {
		if seen[k] != 1 {
			t.Errorf("key %s sent %d times", k, seen[k])
		}
	}
	mu.Unlock()
	out := logs.String()
	for _, role := range []string{"tenant_v1", "tenant_v2"} {
		if strings.Contains(out, as(role)) {
			t.Errorf("the url with %s reached the logs", role)
		}
	}
	if !fleet {
		// The wake-up hears again: its connections are the new role's.
		for {
			var listening int
			if err := check.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE usename = 'tenant_v2' AND application_name IN ('drainer-listen', 'drainer-wake')`).Scan(&listening); err != nil {
				t.Fatal(err)
			}
			if listening == 2 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of the listener's and the wake gate's connections are the new role's, want 2; logs:\n%s", listening, logs.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if !strings.Contains(out, `"database":"rotated"`) {
		t.Error("no log names the database")
	}
	if !strings.Contains(out, "completions an earlier engine on this database could not write taken over") {
		t.Errorf("the first rows' answers were not handed over to the engine on the new credentials; logs:\n%s", out)
	}
}
