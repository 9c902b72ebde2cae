package receiver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/receiver"
	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// The crash tests run the first request in a child process (this test
// binary, re-executed: see TestMain) that writes its effect and is then
// killed with SIGKILL in the middle of its handler, so nothing of the
// receiver runs after the effect: no release, no keep-alive, no rollback
// but the one the database does for a connection that vanished.

// Environment of the crash child.
const (
	crashChildEnv    = "RECEIVER_TEST_CRASH_CHILD" // "1": run crashChild instead of the tests
	crashURLEnv      = "RECEIVER_TEST_CRASH_URL"
	crashAppEnv      = "RECEIVER_TEST_CRASH_APP" // application_name of the child's connections
	crashInTxEnv     = "RECEIVER_TEST_CRASH_IN_TX"
	crashKeyEnv      = "RECEIVER_TEST_CRASH_KEY"
	crashRecoveryEnv = "RECEIVER_TEST_CRASH_RECOVERY"
	effectWritten    = "effect written"
)

// crashChild serves one keyed request whose handler writes its effect,
// says so on stdout, and hangs until the parent kills the process.
func crashChild() int {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(os.Getenv(crashURLEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = os.Getenv(crashAppEnv)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	recovery, err := time.ParseDuration(os.Getenv(crashRecoveryEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	rc, err := receiver.New(pool, receiver.Options{InTransaction: os.Getenv(crashInTxEnv) == "1", RecoveryTimeout: recovery})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	h := rc.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := writeEffect(r, pool); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Println(effectWritten)
		time.Sleep(time.Hour) // killed here
	}))
	r := httptest.NewRequest(http.MethodPost, "/v1/charges", strings.NewReader(`{"amount":5}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(receiver.DefaultKeyHeader, os.Getenv(crashKeyEnv))
	h.ServeHTTP(httptest.NewRecorder(), r)
	return 2
}

// writeEffect inserts the request's effect: through the receiver's
// transaction when there is one, else through pool (committed at once, as
// a call to another system would be).
func writeEffect(r *http.Request, pool *pgxpool.Pool) error {
	const q = `INSERT INTO crash_effects (key) VALUES ($1)`
	key := r.Header.Get(receiver.DefaultKeyHeader)
	if tx := receiver.Tx(r.Context()); tx != nil {
		_, err := tx.Exec(r.Context(), q, key)
		return err
	}
	_, err := pool.Exec(r.Context(), q, key)
	return err
}

// crashBundle is a database with a crash_effects table, and a receiver in
// this process that retries the key the killed child held.
type crashBundle struct {
	t    *testing.T
	url  string
	pool *pgxpool.Pool
	h    http.Handler
	runs atomic.Int64
	logs *testkit.Buffer
	reg  *prometheus.Registry
}

func newCrashBundle(t *testing.T, opts receiver.Options) *crashBundle {
	t.Helper()
	b := &crashBundle{t: t, url: dbtest.NewDatabase(t), logs: &testkit.Buffer{}}
	pool, err := pgxpool.New(t.Context(), b.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b.pool = pool
	if _, err := pool.Exec(t.Context(), `CREATE TABLE crash_effects (key text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	opts.Logger = slog.New(slog.NewTextHandler(b.logs, nil))
	rc, err := receiver.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	b.reg = reg
	b.h = rc.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.runs.Add(1)
		if err := writeEffect(r, pool); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"charged":true}`))
	}))
	return b
}

// abandoned reads drainer_receiver_abandoned_total{outcome} from reg;
// both of its series exist from the start.
func abandoned(t *testing.T, reg *prometheus.Registry, outcome string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "drainer_receiver_abandoned_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("drainer_receiver_abandoned_total{outcome=%q} is not exposed", outcome)
	return 0
}

// killChildMidHandler runs the first request with key in a child process
// and kills it (SIGKILL) once its handler wrote the effect; it returns once
// the database has dropped the child's connections.
func (b *crashBundle) killChildMidHandler(key string, inTx bool, recovery time.Duration) {
	t := b.t
	t.Helper()
	app := fmt.Sprintf("receiver-crash-%d-%s", os.Getpid(), key)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), crashChildEnv+"=1", crashURLEnv+"="+b.url, crashAppEnv+"="+app,
		crashKeyEnv+"="+key, crashRecoveryEnv+"="+recovery.String(), fmt.Sprintf("%s=%d", crashInTxEnv, map[bool]int{false: 0, true: 1}[inTx]))
	var stderr testkit.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	timeout := time.After(2 * time.Minute)
wait:
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				_ = cmd.Wait()
				t.Fatalf("the crash child exited before writing its effect; stderr:\n%s", stderr.String())
			}
			if line == effectWritten {
				break wait
			}
		case <-timeout:
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("the crash child wrote no effect within 2 minutes; stderr:\n%s", stderr.String())
		}
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: nothing runs after this
		t.Fatal(err)
	}
	go func() {
		for range lines {
		}
	}()
	_ = cmd.Wait()
	b.waitFor("the killed child's connections to end", `SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = $1`, app)
}

// waitFor polls query (a boolean) until it is true, for at most two minutes.
func (b *crashBundle) waitFor(what, query string, args ...any) {
	b.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var ok bool
		if err := b.pool.QueryRow(context.Background(), query, args...).Scan(&ok); err != nil {
			b.t.Fatal(err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("waited 2 minutes for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (b *crashBundle) count(query string) int {
	b.t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), query).Scan(&n); err != nil {
		b.t.Fatal(err)
	}
	return n
}

func (b *crashBundle) post(key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/v1/charges", strings.NewReader(`{"amount":5}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(receiver.DefaultKeyHeader, key)
	w := httptest.NewRecorder()
	b.h.ServeHTTP(w, r)
	return w
}

// §11: a process killed mid-handler outside InTransaction leaves its
// effect and an in-flight record. After the recovery timeout a retry gets
// 409 outcome-unknown naming the key, the handler does not run again, and
// the record is reported once (an Error line with scope and key, the
// counter); every later retry gets the same answer.
func TestKilledMidHandlerOutcomeUnknown(t *testing.T) {
	t.Parallel()
	b := newCrashBundle(t, receiver.Options{})
	const key = "charge-7f3a"
	b.killChildMidHandler(key, false, time.Second)
	b.waitFor("the record's recovery deadline to pass",
		`SELECT coalesce(bool_and(locked_until < now()), false) FROM drainer_receiver.records WHERE key = $1`, key)

	for i := range 3 {
		w := b.post(key)
		wantProblem(t, w, http.StatusConflict, "outcome-unknown")
		if got := w.Header().Get("Idempotency-Conflict"); got != "outcome-unknown" {
			t.Fatalf("retry %d: Idempotency-Conflict %q, want outcome-unknown", i, got)
		}
		var p struct {
			Key string `json:"idempotency_key"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Key != key {
			t.Fatalf("retry %d: problem %s does not name the key %q", i, w.Body.String(), key)
		}
	}
	if n := b.runs.Load(); n != 0 {
		t.Fatalf("the handler ran %d times after the crash, want 0", n)
	}
	if n := b.count(`SELECT count(*) FROM crash_effects`); n != 1 {
		t.Fatalf("%d effects, want the killed request's 1", n)
	}
	if got := abandoned(t, b.reg, "outcome_unknown"); got != 1 {
		t.Fatalf("drainer_receiver_abandoned_total{outcome=outcome_unknown} = %v, want 1 (reported once)", got)
	}
	if got := abandoned(t, b.reg, "rerun"); got != 0 {
		t.Fatalf("drainer_receiver_abandoned_total{outcome=rerun} = %v, want 0", got)
	}
	logs := b.logs.String()
	if n := strings.Count(logs, "level=ERROR"); n != 1 || !strings.Contains(logs, "key="+key) || !strings.Contains(logs, `scope=""`) {
		t.Fatalf("logs %q: want one Error line naming the scope and the key", logs)
	}
	if n := b.count(`SELECT count(*) FROM drainer_receiver.records WHERE state = 'outcome_unknown'`); n != 1 {
		t.Fatalf("%d records outcome_unknown, want 1", n)
	}
}

// RerunAbandoned: the service declared the handler safe to run twice, so a
// retry after the recovery timeout runs it again; the rerun is reported too.
func TestKilledMidHandlerRerunAbandoned(t *testing.T) {
	t.Parallel()
	b := newCrashBundle(t, receiver.Options{RerunAbandoned: true})
	const key = "charge-9c41"
	b.killChildMidHandler(key, false, time.Second)
	b.waitFor("the record's recovery deadline to pass",
		`SELECT coalesce(bool_and(locked_until < now()), false) FROM drainer_receiver.records WHERE key = $1`, key)

	wantStatus(t, b.post(key), http.StatusCreated)
	wantStatus(t, b.post(key), http.StatusOK)
	if n := b.runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times after the crash, want 1", n)
	}
	if n := b.count(`SELECT count(*) FROM crash_effects`); n != 2 {
		t.Fatalf("%d effects, want 2 (the killed request's and the rerun's)", n)
	}
	if got := abandoned(t, b.reg, "rerun"); got != 1 {
		t.Fatalf("drainer_receiver_abandoned_total{outcome=rerun} = %v, want 1", got)
	}
	if logs := b.logs.String(); !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "key="+key) {
		t.Fatalf("logs %q: want a Warn line naming the key", logs)
	}
}

// InTransaction: the record is written in the handler's transaction, so
// the kill rolls back record and effect together; a retry runs the handler
// at once (no recovery timeout to wait out) and there is one effect.
func TestKilledMidHandlerInTransaction(t *testing.T) {
	t.Parallel()
	b := newCrashBundle(t, receiver.Options{InTransaction: true})
	const key = "charge-2b08"
	b.killChildMidHandler(key, true, 10*time.Minute)

	if n := b.count(`SELECT count(*) FROM crash_effects`); n != 0 {
		t.Fatalf("%d effects after the crash, want 0 (rolled back)", n)
	}
	if n := b.count(`SELECT count(*) FROM drainer_receiver.records`); n != 0 {
		t.Fatalf("%d records after the crash, want 0 (rolled back with the effect)", n)
	}
	wantStatus(t, b.post(key), http.StatusCreated)
	wantStatus(t, b.post(key), http.StatusOK)
	if n := b.runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want 1", n)
	}
	if n := b.count(`SELECT count(*) FROM crash_effects`); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
	if got := abandoned(t, b.reg, "outcome_unknown") + abandoned(t, b.reg, "rerun"); got != 0 {
		t.Fatalf("drainer_receiver_abandoned_total = %v, want 0: nothing was abandoned", got)
	}
}
