package receiver_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/receiver"
	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5/pgxpool"
)

// With InTransaction, a service host that froze (or was cut off, or
// vanished) mid-handler does not hold the key until Postgres notices the
// dead connection: the request's transaction sets
// idle_in_transaction_session_timeout (here 1 s), so the server ends the
// frozen session, rolling back the record, and a retry runs the handler.
// The frozen handler, once it goes on, finds its statements failing: one
// effect, one record, the second run's answer. The test waits for the
// server to end the session, however long that takes, not for a time.
func TestInTransactionFrozenHostFreesKey(t *testing.T) {
	t.Parallel()
	var (
		calls    atomic.Int64
		pids     = make(chan int, 1)
		thaw     = make(chan struct{})
		firstErr = make(chan error, 1)
	)
	f := newFixture(t, receiver.Options{InTransaction: true, IdleInTransactionTimeout: time.Second}, func(w http.ResponseWriter, r *http.Request) {
		tx := receiver.Tx(r.Context())
		run := calls.Add(1)
		if run == 1 {
			var pid int
			if err := tx.QueryRow(r.Context(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				pids <- 0
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			pids <- pid
			<-thaw // frozen: no statement until the test lets it go on
		}
		_, err := tx.Exec(r.Context(), "INSERT INTO effects (k) VALUES ('order-1')")
		if run == 1 {
			firstErr <- err
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"run":` + string(rune('0'+run)) + `}`))
	})
	f.exec("CREATE TABLE effects (k text PRIMARY KEY)")
	goOn := sync.OnceFunc(func() { close(thaw) })
	t.Cleanup(goOn) // before the pool closes, which waits for the handler's connection
	first := make(chan *httptest.ResponseRecorder, 1)
	go func() { first <- f.post("k", `{}`) }()
	pid := <-pids
	if pid == 0 {
		t.Fatal("the first handler could not read its session's pid")
	}
	testkit.WaitFor(t, time.Minute, "the server to end the frozen request's session", func() (bool, string) {
		var alive bool
		if err := f.pool.QueryRow(t.Context(), "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", pid).Scan(&alive); err != nil {
			return false, err.Error()
		}
		return !alive, "the session is still there"
	})
	w := f.post("k", `{}`)
	if w.Code != http.StatusCreated || w.Body.String() != `{"run":2}` {
		t.Fatalf("retry after the session ended: %d %q, want the second run's 201", w.Code, w.Body.String())
	}
	goOn()
	if err := <-firstErr; err == nil {
		t.Fatal("the frozen handler's statement succeeded after its session ended")
	}
	if w := <-first; w.Code < 500 {
		t.Fatalf("the frozen request answered %d %q, want an error", w.Code, w.Body.String())
	}
	var effects int
	if err := f.pool.QueryRow(t.Context(), "SELECT count(*) FROM effects").Scan(&effects); err != nil {
		t.Fatal(err)
	}
	if n := f.records(); effects != 1 || n != 1 {
		t.Fatalf("%d effects, %d records, want 1 and 1", effects, n)
	}
	wantReplay(t, f, "k", `{}`, http.StatusOK, `{"run":2}`)
	f.wantRuns(2)
}

// poolFixture is an InTransaction receiver on a pool of its own, shaped by
// configure, wrapping handler.
func poolFixture(t *testing.T, configure func(*pgxpool.Config), handler http.HandlerFunc) (*pgxpool.Pool, *receiver.Receiver, http.Handler) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	configure(cfg)
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	rc, err := receiver.New(pool, receiver.Options{InTransaction: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return pool, rc, rc.Wrap(handler)
}

func postTo(h http.Handler, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(`{}`))
	r.Header.Set(receiver.DefaultKeyHeader, key)
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// problemDetail is the detail of a problem answer.
func problemDetail(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	var p struct{ Detail string }
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	return p.Detail
}

// With InTransaction each keyed request holds a connection for its whole
// handler: when none is free within the claim's bound, the 503 says the
// pool was exhausted, not that the store could not be reached. The pool
// has one connection, held by a running handler; the bound of the second
// request lapses on the test's word (LapseBounds), not after 30 s.
func TestInTransactionPoolExhausted(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	_, rc, h := poolFixture(t, func(c *pgxpool.Config) { c.MaxConns = 1 }, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(receiver.DefaultKeyHeader) == "k1" {
			close(entered)
			<-release
		}
		w.WriteHeader(http.StatusCreated)
	})
	free := sync.OnceFunc(func() { close(release) })
	t.Cleanup(free) // before the pool closes, which waits for the held connection
	lapse := receiver.LapseBounds(rc)
	first, second := make(chan *httptest.ResponseRecorder, 1), make(chan *httptest.ResponseRecorder, 1)
	go func() { first <- postTo(h, "k1") }()
	<-entered
	go func() { second <- postTo(h, "k2") }()
	var w *httptest.ResponseRecorder
	testkit.WaitFor(t, time.Minute, "the second request to stop waiting for a connection", func() (bool, string) {
		lapse()
		select {
		case w = <-second:
			return true, ""
		default:
			return false, "no answer yet"
		}
	})
	free()
	wantProblem(t, w, http.StatusServiceUnavailable, "pool-exhausted")
	if w.Header().Get("Retry-After") != "1" || !strings.Contains(problemDetail(t, w), "max_conns") {
		t.Fatalf("pool exhausted: %v %q, want Retry-After: 1 and advice on max_conns", w.Header(), w.Body.String())
	}
	wantStatus(t, <-first, http.StatusCreated)
}

// Under SERIALIZABLE, a request's transaction that the database aborts
// with a serialization failure (40001) is answered 503 naming it, with
// Retry-After, not blaming the store. The handler reads skew_b and writes
// skew_a; meanwhile another transaction reads skew_a, writes skew_b and
// commits first (write skew), so the request's transaction cannot commit.
func TestSerializationFailureNamed(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	pool, _, h := poolFixture(t, func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["default_transaction_isolation"] = "serializable"
	}, func(w http.ResponseWriter, r *http.Request) {
		tx := receiver.Tx(r.Context())
		var n int
		if err := tx.QueryRow(r.Context(), "SELECT count(*) FROM skew_b").Scan(&n); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if _, err := tx.Exec(r.Context(), "INSERT INTO skew_a VALUES (1)"); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		close(entered)
		<-release
		w.WriteHeader(http.StatusCreated)
	})
	if _, err := pool.Exec(t.Context(), "CREATE TABLE skew_a (x int); CREATE TABLE skew_b (x int)"); err != nil {
		t.Fatal(err)
	}
	answer := make(chan *httptest.ResponseRecorder, 1)
	go func() { answer <- postTo(h, "k") }()
	select {
	case <-entered:
	case w := <-answer:
		t.Fatalf("the handler did not get to wait: %d %q", w.Code, w.Body.String())
	}
	free := sync.OnceFunc(func() { close(release) })
	t.Cleanup(free)
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow(t.Context(), "SELECT count(*) FROM skew_a").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), "INSERT INTO skew_b VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	free()
	w := <-answer
	wantProblem(t, w, http.StatusServiceUnavailable, "serialization-failure")
	if w.Header().Get("Retry-After") != "1" || !strings.Contains(problemDetail(t, w), "40001") {
		t.Fatalf("serialization failure: %v %q, want Retry-After: 1 and SQLSTATE 40001 named", w.Header(), w.Body.String())
	}
}

// A key of a version this receiver does not know (only v1 exists), sent
// with a tuple header, is answered 400 naming the version, not as a key
// that differs from its tuple.
func TestUnsupportedKeyVersion(t *testing.T) {
	t.Parallel()
	f := newFixture(t, receiver.Options{}, nil)
	tup := idemkey.Tuple{AgentRunID: "run-1", StepID: "s1", ToolName: "charge"}
	key := "idem_v2_" + strings.TrimPrefix(tup.Key(), idemkey.Prefix)
	w := f.post(key, `{}`, receiver.HeaderTuple, tup.Encoded())
	wantProblem(t, w, http.StatusBadRequest, "unsupported-key-version")
	if d := problemDetail(t, w); !strings.Contains(d, "v2") || !strings.Contains(d, idemkey.Prefix) {
		t.Fatalf("detail %q, want it to name version v2 and the supported %s", d, idemkey.Prefix)
	}
	// Without a tuple header the key is an opaque key like any other.
	wantStatus(t, f.post(key, `{}`), http.StatusCreated)
	f.wantRuns(1)
}
