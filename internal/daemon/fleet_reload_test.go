package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/tooling/pgtemp"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
)

// recorder is a test HTTP provider that counts each idempotency key it is
// sent; requests for tool "slow" wait until hold is closed.
type recorder struct {
	mu   sync.Mutex
	seen map[string]int
	slow chan struct{} // a slow request arrived
	hold chan struct{}
	srv  *httptest.Server
}

func newRecorder() *recorder {
	r := &recorder{seen: map[string]int{}, slow: make(chan struct{}, 16), hold: make(chan struct{})}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.seen[req.Header.Get("Idempotency-Key")]++
		r.mu.Unlock()
		if strings.HasSuffix(req.URL.Path, "/slow") {
			r.slow <- struct{}{}
			<-r.hold
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	return r
}

func (r *recorder) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[key]
}

func (r *recorder) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.seen {
		n += c
	}
	return n
}

// withLogs is cond for testkit.WaitFor, giving the daemon's logs as the
// state while cond does not hold.
func withLogs(logs *testkit.Buffer, cond func() bool) func() (bool, string) {
	return func() (bool, string) {
		if cond() {
			return true, ""
		}
		return false, "logs:\n" + logs.String()
	}
}

// TestRunFleetReload: SIGHUP with databases:. A config that does not load
// is refused (logged) and draining goes on unchanged. A good one swaps the
// adapters of every engine, including the engine of a database the same
// reload adds: new rows reach the new provider, an attempt under way on
// the old one finishes there, the old adapters are closed once, after it,
// and every row is sent exactly once.
func TestRunFleetReload(t *testing.T) {
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
	dbs := []string{"rel_a", "rel_b", "rel_c"}
	for _, db := range dbs {
		createMigrated(t, c, db)
	}
	enqueue := func(db, tool string, n int) []string {
		t.Helper()
		conn, err := pgx.Connect(ctx, c.URL(db))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close(ctx) }()
		var keys []string
		for range n {
			var key string
			if err := conn.QueryRow(ctx, "SELECT key FROM drainer.enqueue($1, $2, $3, '', '{}')",
				"rel-"+db, fmt.Sprint("s", time.Now().UnixNano()), tool).Scan(&key); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, key)
		}
		return keys
	}
	status := func(db, key string) string {
		conn, err := pgx.Connect(ctx, c.URL(db))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close(ctx) }()
		var s string
		if err := conn.QueryRow(ctx, "SELECT status FROM drainer.outbox WHERE key = $1", key).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}

	first, second := newRecorder(), newRecorder()
	defer first.srv.Close()
	defer second.srv.Close()
	released := false
	release := func() {
		if !released {
			released = true
			close(first.hold)
		}
	}
	defer release()
	path := filepath.Join(t.TempDir(), "drainer.yaml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	conf := func(provider string, names ...string) string {
		var static strings.Builder
		for _, n := range names {
			fmt.Fprintf(&static, "    - {name: %s, url: %q}\n", n, c.URL(n))
		}
		return fmt.Sprintf(`adapters:
  p: {type: http, url: "%s/{tool_name}", timeout: 20s}
routes:
  t: {adapter: p}
  slow: {adapter: p}
lease: 60s
databases:
  static:
%s  refresh: 1s
`, provider, static.String())
	}
	write(conf(first.srv.URL, "rel_a", "rel_b"))

	var logs testkit.Buffer
	reload := make(chan struct{})
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(rctx, Options{ConfigPath: path, MetricsAddr: "127.0.0.1:0", Version: "test", Reload: reload,
			Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	}()
	defer func() {
		release()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(90 * time.Second):
			t.Error("run did not stop")
		}
	}()
	hup := func() {
		select {
		case reload <- struct{}{}:
		case <-time.After(90 * time.Second):
			t.Fatal("the reload was not taken")
		}
	}
	delivered := func(r *recorder, keys []string) func() bool {
		return func() bool {
			for _, k := range keys {
				if r.count(k) == 0 {
					return false
				}
			}
			return true
		}
	}

	before := append(enqueue("rel_a", "t", 3), enqueue("rel_b", "t", 3)...)
	testkit.WaitFor(t, 90*time.Second, "rows drained to the first provider", withLogs(&logs, delivered(first, before)))

	// A config that does not parse: refused, logged, nothing changes.
	write("adapters: [\n")
	hup()
	testkit.WaitFor(t, 90*time.Second, "the bad config refused", withLogs(&logs, func() bool {
		return strings.Contains(logs.String(), "config reload refused; keeping the running config")
	}))
	refused := append(enqueue("rel_a", "t", 2), enqueue("rel_b", "t", 2)...)
	testkit.WaitFor(t, 90*time.Second, "rows drained to the first provider after the refusal", withLogs(&logs, delivered(first, refused)))

	// An attempt under way on the first provider across the reload.
	slow := enqueue("rel_a", "slow", 1)
	select {
	case <-first.slow:
	case <-time.After(90 * time.Second):
		t.Fatalf("the slow row was not sent; logs:\n%s", logs.String())
	}

	write(conf(second.srv.URL, "rel_a", "rel_b", "rel_c"))
	hup()
	testkit.WaitFor(t, 90*time.Second, "the config reloaded", withLogs(&logs, func() bool { return strings.Contains(logs.String(), `"msg":"config reloaded"`) }))
	sentFirst := first.total()
	after := append(append(enqueue("rel_a", "t", 3), enqueue("rel_b", "t", 3)...), enqueue("rel_c", "t", 3)...)
	testkit.WaitFor(t, 90*time.Second, "rows of every database, rel_c added by the reload, drained to the second provider", withLogs(&logs, delivered(second, after)))
	if n := first.total(); n != sentFirst {
		t.Errorf("the first provider was sent %d requests after the reload", n-sentFirst)
	}
	if strings.Contains(logs.String(), "adapters closed") {
		t.Error("the replaced adapters were closed while an attempt on them was under way")
	}

	release()
	testkit.WaitFor(t, 90*time.Second, "the slow row succeeded", withLogs(&logs, func() bool { return status("rel_a", slow[0]) == "succeeded" }))
	testkit.WaitFor(t, 90*time.Second, "the replaced adapters closed", withLogs(&logs, func() bool { return strings.Contains(logs.String(), "adapters closed") }))
	if second.count(slow[0]) != 0 {
		t.Error("the row under way at the reload was sent to the second provider")
	}
	if n := strings.Count(logs.String(), "adapters closed"); n != 1 {
		t.Errorf("adapters closed %d times before shutdown, want 1", n)
	}
	for _, k := range append(append(before, refused...), slow...) {
		if n := first.count(k) + second.count(k); n != 1 || first.count(k) != 1 {
			t.Errorf("row %s: first provider %d, second %d, want once on the first", k, first.count(k), second.count(k))
		}
	}
	for _, k := range after {
		if n := first.count(k) + second.count(k); n != 1 || second.count(k) != 1 {
			t.Errorf("row %s: first provider %d, second %d, want once on the second", k, first.count(k), second.count(k))
		}
	}
	if out := logs.String(); strings.Contains(out, c.URL("rel_c")) || strings.Contains(out, "panic") {
		t.Error("a url or a panic in the logs")
	}
}
