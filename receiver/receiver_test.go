package receiver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
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
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) == "1" {
		os.Exit(crashChild()) // a child of the crash tests (crash_test.go)
	}
	dbtest.Main(m)
}

// fixture is a receiver-wrapped handler on a fresh database.
type fixture struct {
	t     *testing.T
	pool  *pgxpool.Pool
	rc    *receiver.Receiver
	h     http.Handler
	runs  atomic.Int64
	table string
}

func newPool(t *testing.T) *pgxpool.Pool { return newPoolB(t) }

func newPoolB(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), dbtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// newFixture wraps handler (nil: a 201 echoing the body as {"echo": ...})
// behind a migrated receiver with opts.
func newFixture(t *testing.T, opts receiver.Options, handler http.HandlerFunc) *fixture {
	t.Helper()
	f := &fixture{t: t, pool: newPool(t)}
	rc, err := receiver.New(f.pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.rc = rc
	schema := opts.Schema
	if schema == "" {
		schema = receiver.DefaultSchema
	}
	f.table = `"` + schema + `".records`
	if handler == nil {
		handler = func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Location", "/v1/orders/1")
			w.Header().Set("X-Not-Stored", "yes")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"order":1, "echo_bytes":%d}`, len(b))
		}
	}
	f.h = rc.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.runs.Add(1)
		handler(w, r)
	}))
	return f
}

// do sends one request straight to the wrapped handler.
func (f *fixture) do(method, path, key, contentType, body string, hdr ...string) *httptest.ResponseRecorder {
	f.t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if key != "" {
		r.Header.Set(receiver.DefaultKeyHeader, key)
	}
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w
}

// heldPost makes a fixture with opts whose handler answers 201 with body
// once released, and starts a POST of key "k" to it: entered is closed
// once the handler runs, release lets it answer, done gets the answer.
func heldPost(t *testing.T, opts receiver.Options, body string) (f *fixture, entered <-chan struct{}, release func(), done <-chan *httptest.ResponseRecorder) {
	t.Helper()
	in, out := make(chan struct{}), make(chan struct{})
	f = newFixture(t, opts, func(w http.ResponseWriter, r *http.Request) {
		close(in)
		<-out
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(body))
	})
	answer := make(chan *httptest.ResponseRecorder, 1)
	go func() { answer <- f.post("k", `{}`) }()
	return f, in, sync.OnceFunc(func() { close(out) }), answer
}

func (f *fixture) post(key, body string, hdr ...string) *httptest.ResponseRecorder {
	f.t.Helper()
	return f.do(http.MethodPost, "/v1/orders", key, "application/json", body, hdr...)
}

func (f *fixture) records() int {
	f.t.Helper()
	var n int
	if err := f.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+f.table).Scan(&n); err != nil {
		f.t.Fatal(err)
	}
	return n
}

func (f *fixture) exec(sql string, args ...any) {
	f.t.Helper()
	if _, err := f.pool.Exec(context.Background(), sql, args...); err != nil {
		f.t.Fatal(err)
	}
}

func wantStatus(t *testing.T, w *httptest.ResponseRecorder, status int) {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d, want %d; headers %v; body %q", w.Code, status, w.Header(), w.Body.String())
	}
}

func wantProblem(t *testing.T, w *httptest.ResponseRecorder, status int, slug string) {
	t.Helper()
	wantStatus(t, w, status)
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", w.Body.String(), err)
	}
	if p.Type != "https://drainer.dev/problems/"+slug || p.Status != status || p.Title == "" || p.Detail == "" {
		t.Fatalf("problem %+v, want type .../%s and status %d", p, slug, status)
	}
}

func (f *fixture) wantRuns(n int64) {
	f.t.Helper()
	if got := f.runs.Load(); got != n {
		f.t.Fatalf("handler ran %d times, want %d", got, n)
	}
}

// §11: first request, then a byte-identical replay (seed: 201 becomes 200).
func TestFirstRequestThenReplay(t *testing.T) {
	t.Parallel()
	for _, mode := range []receiver.Mode{receiver.ModeSeed, receiver.ModeIETF} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, receiver.Options{Mode: mode, StoreHeaders: []string{"x-custom"}}, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Location", "/v1/orders/7")
				w.Header().Set("X-Custom", "kept")
				w.Header().Set("X-Not-Stored", "dropped")
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write([]byte(`{"id": 7,  "spacing":"kept as is"}`))
			})
			first := f.post("k1", `{"amount":5}`)
			wantStatus(t, first, http.StatusCreated)
			if got := first.Header().Get("Idempotency-Replay"); got != "false" {
				t.Fatalf("first answer Idempotency-Replay %q, want false", got)
			}
			for i := range 2 {
				again := f.post("k1", `{"amount":5}`)
				want := http.StatusOK
				if mode == receiver.ModeIETF {
					want = http.StatusCreated
				}
				wantStatus(t, again, want)
				if !bytes.Equal(again.Body.Bytes(), first.Body.Bytes()) {
					t.Fatalf("replay %d body %q, want byte-identical %q", i, again.Body.String(), first.Body.String())
				}
				for name, want := range map[string]string{
					"Idempotency-Replay": "true", "Idempotent-Replayed": "true", "Location": "/v1/orders/7",
					"X-Custom": "kept", "X-Not-Stored": "", "Content-Type": "application/json",
				} {
					if got := again.Header().Get(name); got != want {
						t.Errorf("replay %d header %s = %q, want %q", i, name, got, want)
					}
				}
			}
			f.wantRuns(1)
		})
	}
}

// JCS: key order, whitespace and 1.0 vs 1 of a JSON body are the same request.
func TestJSONBodyCanonical(t *testing.T) {
	t.Parallel()
	f := newFixture(t, receiver.Options{}, nil)
	wantStatus(t, f.post("k", `{"b":[1,2,{"y":true,"x":null}],"a":1.0,"c":"é"}`), http.StatusCreated)
	wantStatus(t, f.do(http.MethodPost, "/v1/orders", "k", "application/vnd.api+json; charset=utf-8",
		"{ \"a\": 1, \"c\":\"\\u00e9\",\n \"b\": [1, 2.0, {\"x\": null, \"y\": true}] }"), http.StatusOK)
	f.wantRuns(1)
}

// A non-JSON body (or a JSON content type whose body does not parse) is
// fingerprinted over its bytes.
func TestNonJSONBodyFingerprintBytes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, receiver.Options{}, nil)
	wantStatus(t, f.do(http.MethodPost, "/p", "k1", "text/plain", `{"a":1}`), http.StatusCreated)
	wantProblem(t, f.do(http.MethodPost, "/p", "k1", "text/plain", `{"a": 1}`), http.StatusConflict, "payload-mismatch")
	wantStatus(t, f.do(http.MethodPost, "/p", "k1", "text/plain", `{"a":1}`), http.StatusOK)

	wantStatus(t, f.do(http.MethodPost, "/p", "k2", "application/json", `{"a":1,`), http.StatusCreated)
	wantProblem(t, f.do(http.MethodPost, "/p", "k2", "application/json", `{"a": 1,`), http.StatusConflict, "payload-mismatch")
	f.wantRuns(2)
}

// §11: same key, different request: 409 (ietf: 422), handler not run.
func TestPayloadMismatch(t *testing.T) {
	t.Parallel()
	for _, mode := range []receiver.Mode{receiver.ModeSeed, receiver.ModeIETF} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, receiver.Options{Mode: mode}, nil)
			wantStatus(t, f.post("k", `{"amount":5}`), http.StatusCreated)
			want := http.StatusConflict
			if mode == receiver.ModeIETF {
				want = http.StatusUnprocessableEntity
			}
			for _, w := range []*httptest.ResponseRecorder{
				f.post("k", `{"amount":6}`),
				f.do(http.MethodPost, "/v1/other", "k", "application/json", `{"amount":5}`),
				f.do(http.MethodPut, "/v1/orders", "k", "application/json", `{"amount":5}`),
			} {
				wantProblem(t, w, want, "payload-mismatch")
				if got := w.Header().Get("Idempotency-Conflict"); got != "payload-mismatch" {
					t.Fatalf("Idempotency-Conflict %q", got)
				}
			}
			f.wantRuns(1)
		})
	}
}

// §11: same key while the first still runs: 409 in-flight, Retry-After: 1.
func TestInFlight(t *testing.T) {
	t.Parallel()
	for _, mode := range []receiver.Mode{receiver.ModeSeed, receiver.ModeIETF} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			f, entered, release, done := heldPost(t, receiver.Options{Mode: mode}, "made")
			<-entered
			w := f.post("k", `{}`)
			wantProblem(t, w, http.StatusConflict, "in-flight")
			if w.Header().Get("Idempotency-Conflict") != "in-flight" || w.Header().Get("Retry-After") != "1" {
				t.Fatalf("in-flight headers %v", w.Header())
			}
			release()
			wantStatus(t, <-done, http.StatusCreated)
			again := f.post("k", `{}`)
			if again.Header().Get("Idempotency-Replay") != "true" || again.Body.String() != "made" {
				t.Fatalf("after completion: %d %v %q", again.Code, again.Header(), again.Body.String())
			}
			f.wantRuns(1)
		})
	}
}

// §11: the tuple header is checked against the key (docs/reference.md §1).
func TestTupleHeader(t *testing.T) {
	t.Parallel()
	f := newFixture(t, receiver.Options{}, nil)
	tup := idemkey.Tuple{AgentRunID: "run-1", StepID: "s1", ToolName: "charge", BusinessScope: "inv:5"}
	other := idemkey.Tuple{AgentRunID: "run-1", StepID: "s2", ToolName: "charge", BusinessScope: "inv:5"}
	wantStatus(t, f.post(tup.Key(), `{}`, receiver.HeaderTuple, tup.Encoded()), http.StatusCreated)
	for name, enc := range map[string]string{
		"other tuple":  other.Encoded(),
		"not base64":   "***",
		"padded":       tup.Encoded() + "==",
		"not a tuple":  "eyJ4IjoxfQ", // {"x":1}
		"not JSON":     "bm90IGpzb24",
		"trailing doc": "e30ge30", // {} {}
	} {
		t.Run(name, func(t *testing.T) {
			wantProblem(t, f.post(tup.Key(), `{}`, receiver.HeaderTuple, enc), http.StatusBadRequest, "tuple-mismatch")
		})
	}
	// A key that is not the tuple's.
	wantProblem(t, f.post("some-other-key", `{}`, receiver.HeaderTuple, tup.Encoded()), http.StatusBadRequest, "tuple-mismatch")
	f.wantRuns(1)
	if n := f.records(); n != 1 {
		t.Fatalf("%d records, want 1", n)
	}
}

// §11: a missing key where one is required: 400; other methods pass through.
func TestMissingKeyAndPassThrough(t *testing.T) {
	t.Parallel()
	f := newFixture(t, receiver.Options{}, nil)
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		wantProblem(t, f.do(m, "/x", "", "application/json", `{}`), http.StatusBadRequest, "missing-key")
	}
	f.wantRuns(0)
	w := f.do(http.MethodGet, "/x", "", "", "")
	wantStatus(t, w, http.StatusCreated)
	if w.Header().Get("Idempotency-Replay") != "" {
		t.Fatalf("a pass-through answer carries Idempotency-Replay")
	}
	f.wantRuns(1)

	g := newFixture(t, receiver.Options{KeyHeader: "x-request-key", RequireKey: func(r *http.Request) bool { return r.URL.Path == "/keyed" }}, nil)
	wantStatus(t, g.do(http.MethodPost, "/free", "", "", ""), http.StatusCreated)
	wantProblem(t, g.do(http.MethodPost, "/keyed", "k", "", ""), http.StatusBadRequest, "missing-key")
	r := httptest.NewRequest(http.MethodPost, "/keyed", nil)
	r.Header.Set("X-Request-Key", "k")
	rw := httptest.NewRecorder()
	g.h.ServeHTTP(rw, r)
	wantStatus(t, rw, http.StatusCreated)
}

// A key over 255 bytes, with a control character or not UTF-8: 400.
func TestInvalidKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t, receiver.Options{}, nil)
	for name, key := range map[string]string{
		"256 bytes": strings.Repeat("k", 256),
		"newline":   "a\nb",
		"tab":       "a\tb",
		"DEL":       "a\x7fb",
		"NUL":       "a\x00b",
		"not UTF-8": "a\xffb",
	} {
		w := f.post(key, `{}`)
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "invalid-key") {
			t.Errorf("%s: %d %q, want 400 invalid-key", name, w.Code, w.Body.String())
		}
	}
	r := httptest.NewRequest(http.MethodPost, "/x", nil)
	r.Header.Add(receiver.DefaultKeyHeader, "a")
	r.Header.Add(receiver.DefaultKeyHeader, "b")
	rw := httptest.NewRecorder()
	f.h.ServeHTTP(rw, r)
	wantProblem(t, rw, http.StatusBadRequest, "invalid-key")
	f.wantRuns(0)
	wantStatus(t, f.post(strings.Repeat("k", 255), `{}`), http.StatusCreated)
	wantStatus(t, f.post("ключ é", `{}`), http.StatusCreated)
	f.wantRuns(2)
}

// A body over the limit: 413 before anything is stored, with or without
// Content-Length.
func TestBodyTooLarge(t *testing.T) {
	t.Parallel()
	f := newFixture(t, receiver.Options{MaxBody: 64}, nil)
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	big := strings.Repeat("x", 65)
	wantProblem(t, f.post("k", big), http.StatusRequestEntityTooLarge, "too-large")
	// Chunked, no Content-Length: the limit is found while reading.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1", io.MultiReader(strings.NewReader(big[:40]), strings.NewReader(big[40:])))
	req.ContentLength = -1
	req.Header.Set(receiver.DefaultKeyHeader, "k")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked: status %d, want 413", resp.StatusCode)
	}
	if n := f.records(); n != 0 {
		t.Fatalf("%d records after 413s, want 0", n)
	}
	f.wantRuns(0)
	wantStatus(t, f.post("k", strings.Repeat("x", 64)), http.StatusCreated)
}

// The whole body is read and fingerprinted, however it arrives.
func TestBodyReadInFull(t *testing.T) {
	t.Parallel()
	var got atomic.Value
	f := newFixture(t, receiver.Options{}, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Store(string(b))
		w.WriteHeader(http.StatusCreated)
	})
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	send := func(last string) int {
		pr, pw := io.Pipe()
		go func() {
			for range 100 {
				_, _ = pw.Write([]byte(strings.Repeat("a", 1000)))
			}
			_, _ = pw.Write([]byte(last))
			_ = pw.Close()
		}()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/chunks", pr)
		req.Header.Set(receiver.DefaultKeyHeader, "k")
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if c := send("END1"); c != http.StatusCreated {
		t.Fatalf("first: %d", c)
	}
	if s, _ := got.Load().(string); len(s) != 100*1000+4 || !strings.HasSuffix(s, "END1") {
		t.Fatalf("handler saw %d bytes", len(s))
	}
	if c := send("END2"); c != http.StatusConflict {
		t.Fatalf("same key, last chunk differs: %d, want 409", c)
	}
	if c := send("END1"); c != http.StatusOK {
		t.Fatalf("same key, same body: %d, want 200", c)
	}
	f.wantRuns(1)
}

// 5xx answers are not stored (by default); 4xx are.
func TestServerErrorsNotStored(t *testing.T) {
	t.Parallel()
	var status atomic.Int64
	status.Store(http.StatusServiceUnavailable)
	handler := func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(status.Load()))
		_, _ = w.Write([]byte("answer"))
	}
	f := newFixture(t, receiver.Options{}, handler)
	wantStatus(t, f.post("k", `{}`), http.StatusServiceUnavailable)
	if n := f.records(); n != 0 {
		t.Fatalf("%d records after a 503, want 0", n)
	}
	status.Store(http.StatusUnprocessableEntity)
	wantStatus(t, f.post("k", `{}`), http.StatusUnprocessableEntity)
	status.Store(http.StatusCreated)
	w := f.post("k", `{}`)
	wantStatus(t, w, http.StatusUnprocessableEntity)
	if w.Header().Get("Idempotency-Replay") != "true" {
		t.Fatal("stored 4xx not replayed")
	}
	f.wantRuns(2)

	status.Store(http.StatusInternalServerError)
	g := newFixture(t, receiver.Options{StoreServerErrors: true}, handler)
	wantStatus(t, g.post("k", `{}`), http.StatusInternalServerError)
	status.Store(http.StatusCreated)
	w = g.post("k", `{}`)
	wantStatus(t, w, http.StatusInternalServerError)
	if w.Header().Get("Idempotency-Replay") != "true" {
		t.Fatal("stored 5xx not replayed with StoreServerErrors")
	}
	g.wantRuns(1)
}

// A handler that panics: the record is released and the panic re-raised.
func TestHandlerPanic(t *testing.T) {
	t.Parallel()
	var panicking atomic.Bool
	panicking.Store(true)
	f := newFixture(t, receiver.Options{}, func(w http.ResponseWriter, r *http.Request) {
		if panicking.Load() {
			panic("handler bug")
		}
		w.WriteHeader(http.StatusCreated)
	})
	func() {
		defer func() {
			if v := recover(); v != "handler bug" {
				t.Fatalf("recovered %v, want the handler's panic", v)
			}
		}()
		f.post("k", `{}`)
		t.Fatal("the panic was swallowed")
	}()
	if n := f.records(); n != 0 {
		t.Fatalf("%d records after the panic, want 0 (released)", n)
	}
	panicking.Store(false)
	wantStatus(t, f.post("k", `{}`), http.StatusCreated)
	f.wantRuns(2)
}

// A database down: 503 with Retry-After; the handler does not run.
func TestDatabaseDown(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // nothing listens there now
	pool, err := pgxpool.New(t.Context(), "postgres://u:p@"+addr+"/db?connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var logs testkit.Buffer
	rc, err := receiver.New(pool, receiver.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	h := rc.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs.Add(1) }))
	r := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(`{"card":"4242-secret"}`))
	r.Header.Set(receiver.DefaultKeyHeader, "key-secret-17")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	wantProblem(t, w, http.StatusServiceUnavailable, "unavailable")
	if w.Header().Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
	if runs.Load() != 0 {
		t.Fatal("the handler ran with the database down")
	}
	if got := logs.String(); !strings.Contains(got, "claim failed") || strings.Contains(got, "secret") {
		t.Fatalf("log %q: want the claim failure, without key or payload", got)
	}
	if err := rc.Migrate(t.Context()); err == nil || !strings.Contains(err.Error(), "drainer_receiver") {
		t.Fatalf("Migrate with the database down: %v", err)
	}
}

// RerunAbandoned: a first request whose deadline passed (its process
// presumed dead) is taken over and its handler run again; the late first
// handler's completion is fenced off.
func TestRecoveryTakeover(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	entered, release := make(chan struct{}), make(chan struct{})
	f := newFixture(t, receiver.Options{RerunAbandoned: true}, func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		if n == 1 {
			close(entered)
			<-release
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "call %d", n)
	})
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- f.post("k", `{}`) }()
	<-entered
	wantProblem(t, f.post("k", `{}`), http.StatusConflict, "in-flight")
	// The first one's process is presumed dead once its deadline passes
	// on the database clock.
	f.exec("UPDATE " + f.table + " SET locked_until = now() - interval '1 second'")
	second := f.post("k", `{}`)
	wantStatus(t, second, http.StatusCreated)
	if second.Body.String() != "call 2" || second.Header().Get("Idempotency-Replay") != "false" {
		t.Fatalf("takeover answer %q %v", second.Body.String(), second.Header())
	}
	close(release)
	<-done
	w := f.post("k", `{}`)
	if w.Body.String() != "call 2" || w.Header().Get("Idempotency-Replay") != "true" {
		t.Fatalf("replay after takeover: %q %v, want the takeover's answer", w.Body.String(), w.Header())
	}
}

// Without RerunAbandoned a record past its deadline is never run again:
// retries get 409 outcome-unknown. If its handler was in fact alive but
// cut off from the database (here: it holds the only connection of its
// pool, so its deadline cannot be moved and lapses), its late answer is
// still stored and resolves the record: later retries get the replay.
func TestOutcomeUnknownResolvedByLateAnswer(t *testing.T) {
	t.Parallel()
	url := dbtest.NewDatabase(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	cutOff, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cutOff.Close)
	first, err := receiver.New(cutOff, receiver.Options{RecoveryTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	letGo := sync.OnceFunc(func() { close(release) })
	t.Cleanup(letGo) // before the pools close, also when the test fails early
	h := first.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := cutOff.Acquire(r.Context())
		if err != nil {
			t.Error(err)
			return
		}
		close(entered)
		<-release
		conn.Release()
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("late"))
	}))
	// Retries go to another replica, with its own pool.
	f := &fixture{t: t, table: `"drainer_receiver".records`}
	if f.pool, err = pgxpool.New(t.Context(), url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.pool.Close)
	second, err := receiver.New(f.pool, receiver.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	f.h = second.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { f.runs.Add(1) }))

	done := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		r := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(`{}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set(receiver.DefaultKeyHeader, "k")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		done <- w
	}()
	<-entered
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var lapsed bool
		if err := f.pool.QueryRow(t.Context(), "SELECT locked_until < now() FROM "+f.table).Scan(&lapsed); err != nil {
			t.Fatal(err)
		}
		if lapsed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cut-off handler's deadline never lapsed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for range 2 {
		w := f.post("k", `{}`)
		wantProblem(t, w, http.StatusConflict, "outcome-unknown")
		if !strings.Contains(w.Body.String(), `"idempotency_key":"k"`) {
			t.Fatalf("problem %s does not name the key", w.Body.String())
		}
	}
	wantProblem(t, f.post("k", `{"other":1}`), http.StatusConflict, "payload-mismatch")
	letGo()
	wantStatus(t, <-done, http.StatusCreated)
	w := f.post("k", `{}`)
	if w.Code != http.StatusOK || w.Body.String() != "late" || w.Header().Get("Idempotency-Replay") != "true" {
		t.Fatalf("after the late answer: %d %q %v, want its replay", w.Code, w.Body.String(), w.Header())
	}
	f.wantRuns(0)
}

// The TTL is enforced: an expired key runs the handler again (even with
// another payload). Expiry is decided by the database clock.
func TestExpiry(t *testing.T) {
	t.Parallel()
	f := newFixture(t, receiver.Options{TTL: time.Hour}, nil)
	wantStatus(t, f.post("k", `{"a":1}`), http.StatusCreated)
	var ttl time.Duration
	if err := f.pool.QueryRow(t.Context(), "SELECT extract(epoch FROM expires_at - created_at)::bigint FROM "+f.table).Scan(&ttl); err != nil {
		t.Fatal(err)
	}
	if ttl != 3600 {
		t.Fatalf("expires_at - created_at = %ds, want 3600", ttl)
	}
	wantStatus(t, f.post("k", `{"a":1}`), http.StatusOK)
	f.exec("UPDATE " + f.table + " SET expires_at = now() - interval '1 microsecond'")
	w := f.post("k", `{"a":2}`)
	wantStatus(t, w, http.StatusCreated)
	if w.Header().Get("Idempotency-Replay") != "false" {
		t.Fatal("an expired key's new answer is marked as a replay")
	}
	wantStatus(t, f.post("k", `{"a":2}`), http.StatusOK)
	f.wantRuns(2)
}

// Clock skew between replicas does not matter: every timestamp comes from
// the database, never from the process (here: a record written with
// times far from the process clock still decides by the database's now()).
func TestDatabaseClockDecides(t *testing.T) {
	t.Parallel()
	f := newFixture(t, receiver.Options{}, nil)
	wantStatus(t, f.post("k", `{}`), http.StatusCreated)
	var off bool
	if err := f.pool.QueryRow(t.Context(), `SELECT created_at <> completed_at AND created_at <= now() AND
		abs(extract(epoch FROM created_at - now())) < 300 FROM `+f.table).Scan(&off); err != nil {
		t.Fatal(err)
	}
	// Records stamped a year ahead (as a replica with a skewed clock
	// would, if it used its own): still valid by the database's clock.
	f.exec("UPDATE " + f.table + " SET created_at = now() + interval '1 year', expires_at = now() + interval '1 year 1 day'")
	wantStatus(t, f.post("k", `{}`), http.StatusOK)
	// And one stamped a year behind is expired, whatever the process thinks.
	f.exec("UPDATE " + f.table + " SET created_at = now() - interval '1 year', expires_at = now() - interval '1 year' + interval '1 day'")
	wantStatus(t, f.post("k", `{}`), http.StatusCreated)
	f.wantRuns(2)
}

// The same key in two scopes is two records.
func TestScopes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, receiver.Options{Scope: func(r *http.Request) string { return r.Header.Get("X-Account") }}, nil)
	wantStatus(t, f.post("k", `{"a":1}`, "X-Account", "acct_1"), http.StatusCreated)
	wantStatus(t, f.post("k", `{"a":2}`, "X-Account", "acct_2"), http.StatusCreated)
	wantStatus(t, f.post("k", `{"a":1}`, "X-Account", "acct_1"), http.StatusOK)
	wantProblem(t, f.post("k", `{"a":1}`, "X-Account", "acct_2"), http.StatusConflict, "payload-mismatch")
	f.wantRuns(2)
	if n := f.records(); n != 2 {
		t.Fatalf("%d records, want 2", n)
	}
}

// 50 concurrent requests with one key over real connections: one effect,
// with and without InTransaction.
func TestConcurrentSameKey(t *testing.T) {
	t.Parallel()
	for _, inTx := range []bool{false, true} {
		t.Run(fmt.Sprintf("InTransaction=%v", inTx), func(t *testing.T) {
			t.Parallel()
			testConcurrentSameKey(t, receiver.Options{InTransaction: inTx})
		})
	}
}

func testConcurrentSameKey(t *testing.T, opts receiver.Options) {
	var effects atomic.Int64
	f := newFixture(t, opts, func(w http.ResponseWriter, r *http.Request) {
		effects.Add(1)
		time.Sleep(20 * time.Millisecond) // widen the window; asserts nothing about time
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":1}`))
	})
	srv := httptest.NewServer(f.h)
	t.Cleanup(srv.Close)
	const n = 50
	var wg sync.WaitGroup
	codes := make(chan int, n)
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/orders", strings.NewReader(`{"a":1}`))
			req.Header.Set(receiver.DefaultKeyHeader, "same")
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultTransport.(*http.Transport).Clone().RoundTrip(req)
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	close(start)
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	if effects.Load() != 1 || count[http.StatusCreated] != 1 || count[http.StatusCreated]+count[http.StatusOK]+count[http.StatusConflict] != n {
		t.Fatalf("effects %d, answers %v: want one effect, one 201, the rest 200 or 409", effects.Load(), count)
	}
	wantStatus(t, f.post("same", `{"a":1}`), http.StatusOK)

	// Once completed, concurrent retries all get the replay (no lock taken).
	replays := make(chan int, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replays <- f.post("same", `{"a":1}`).Code
		}()
	}
	wg.Wait()
	close(replays)
	for c := range replays {
		if c != http.StatusOK {
			t.Fatalf("a concurrent retry after completion answered %d, want 200", c)
		}
	}
	if effects.Load() != 1 {
		t.Fatalf("%d effects", effects.Load())
	}
}

// InTransaction: the handler's effect and the record commit together.
func TestInTransaction(t *testing.T) {
	t.Parallel()
	var fail atomic.Int64 // 0 ok, 1 answer 500, 2 panic
	f := newFixture(t, receiver.Options{InTransaction: true}, func(w http.ResponseWriter, r *http.Request) {
		tx := receiver.Tx(r.Context())
		if tx == nil {
			http.Error(w, "no transaction", http.StatusTeapot)
			return
		}
		if _, err := tx.Exec(r.Context(), "INSERT INTO effects (k) VALUES ($1)", r.Header.Get("Idempotency-Key")); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		switch fail.Load() {
		case 1:
			w.WriteHeader(http.StatusInternalServerError)
			return
		case 2:
			panic("after the effect")
		}
		w.WriteHeader(http.StatusCreated)
	})
	f.exec("CREATE TABLE effects (k text NOT NULL)")
	effects := func() int {
		var n int
		if err := f.pool.QueryRow(t.Context(), "SELECT count(*) FROM effects").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	fail.Store(1)
	wantStatus(t, f.post("k", `{}`), http.StatusInternalServerError)
	fail.Store(2)
	func() {
		defer func() { _ = recover() }()
		f.post("k", `{}`)
	}()
	if effects() != 0 || f.records() != 0 {
		t.Fatalf("after a 500 and a panic: %d effects, %d records, want none", effects(), f.records())
	}
	fail.Store(0)
	wantStatus(t, f.post("k", `{}`), http.StatusCreated)
	wantStatus(t, f.post("k", `{}`), http.StatusOK)
	if effects() != 1 || f.records() != 1 {
		t.Fatalf("%d effects, %d records, want 1 and 1", effects(), f.records())
	}
	f.wantRuns(3)
}

// Prune deletes expired records in batches, and only those.
func TestPrune(t *testing.T) {
	t.Parallel()
	f := newFixture(t, receiver.Options{}, nil)
	f.exec(`INSERT INTO ` + f.table + ` (scope, key, fingerprint, state, status, headers, body, expires_at)
		SELECT '', 'old' || i, '\x00', 'completed', 201, '{}', '', now() - interval '1 second' FROM generate_series(1, 2500) i`)
	f.exec(`INSERT INTO ` + f.table + ` (scope, key, fingerprint, state, locked_until, expires_at)
		SELECT '', 'live' || i, '\x00', 'in_flight', now() + interval '1 minute', now() + interval '1 hour' FROM generate_series(1, 10) i`)
	n, err := f.rc.Prune(t.Context())
	if err != nil || n != 2500 {
		t.Fatalf("Prune: %d, %v; want 2500", n, err)
	}
	if left := f.records(); left != 10 {
		t.Fatalf("%d records left, want 10", left)
	}
	if n, err := f.rc.Prune(t.Context()); err != nil || n != 0 {
		t.Fatalf("second Prune: %d, %v", n, err)
	}
}

// Migrate is idempotent and safe from many processes at once.
func TestMigrateConcurrent(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	rc, err := receiver.New(pool, receiver.Options{Schema: "recv_many"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- rc.Migrate(t.Context()) }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Migrate on an up-to-date store (a replica starting up beside running
// ones) takes no lock on the records table: it returns while another
// transaction holds the table's RowExclusiveLock (an in-transaction handler
// that claimed its record), rather than queueing behind it and, with it,
// every request that comes after.
func TestMigrateDoesNotWaitForRunningRequests(t *testing.T) {
	t.Parallel()
	f := newFixture(t, receiver.Options{}, nil)
	holder, err := f.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(context.WithoutCancel(t.Context()))
	if _, err := holder.Exec(t.Context(), `INSERT INTO `+f.table+` (scope, key, fingerprint, state, locked_until, expires_at)
		VALUES ('', 'running', '\x00', 'in_flight', now() + interval '1 minute', now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	// Generous: an up-to-date Migrate takes milliseconds; one that waits
	// for the holder waits until this bound, since the holder commits only
	// after Migrate has returned.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	start := time.Now()
	err = f.rc.Migrate(ctx)
	if err != nil {
		t.Fatalf("Migrate while a request's transaction holds the records table (after %v): %v; want it to return at once, taking no table lock",
			time.Since(start).Round(time.Millisecond), err)
	}
	if err := holder.Commit(t.Context()); err != nil {
		t.Fatalf("the request's transaction, still open when Migrate returned: %v", err)
	}
	if n := f.records(); n != 1 {
		t.Fatalf("%d records, want the request's 1", n)
	}
	// A store missing a part is still completed.
	f.exec(`DROP INDEX drainer_receiver.records_expires_idx`)
	if err := f.rc.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	var idx bool
	if err := f.pool.QueryRow(t.Context(), `SELECT to_regclass('drainer_receiver.records_expires_idx') IS NOT NULL`).Scan(&idx); err != nil || !idx {
		t.Fatalf("the expiry index after Migrate on a store without it: %v, %v", idx, err)
	}
}

// A store created by an earlier version (its state check allowed only
// in_flight and completed) is upgraded in place by Migrate, its records
// kept; Migrate again changes nothing.
func TestMigrateUpgradesEarlierStore(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(t.Context(), sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec(`CREATE SCHEMA drainer_receiver;
CREATE TABLE drainer_receiver.records (
    scope text NOT NULL, key text NOT NULL, fingerprint bytea NOT NULL, state text NOT NULL,
    locked_until timestamptz, status integer, headers jsonb, body bytea,
    created_at timestamptz NOT NULL DEFAULT now(), completed_at timestamptz, expires_at timestamptz NOT NULL,
    PRIMARY KEY (scope, key), CHECK (state IN ('in_flight', 'completed')));
CREATE INDEX records_expires_idx ON drainer_receiver.records (expires_at);`)
	fp := receiver.Fingerprint(http.MethodPost, "/v1/orders", "application/json", []byte(`{}`))
	exec(`INSERT INTO drainer_receiver.records (scope, key, fingerprint, state, status, headers, body, completed_at, expires_at)
		VALUES ('', 'old', $1, 'completed', 201, '{}', 'stored before', now(), now() + interval '1 hour'),
		       ('', 'stuck', $1, 'in_flight', NULL, NULL, NULL, NULL, now() + interval '1 hour')`, fp[:])
	exec(`UPDATE drainer_receiver.records SET locked_until = now() - interval '1 second' WHERE key = 'stuck'`)
	rc, err := receiver.New(pool, receiver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := rc.Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	var checks string
	if err := pool.QueryRow(t.Context(), `SELECT string_agg(conname, ',' ORDER BY conname) FROM pg_constraint
		WHERE conrelid = 'drainer_receiver.records'::regclass AND contype = 'c'`).Scan(&checks); err != nil {
		t.Fatal(err)
	}
	if checks != "records_state" {
		t.Fatalf("check constraints %q after the upgrade, want records_state only", checks)
	}
	h := rc.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("the handler ran") }))
	for key, want := range map[string]int{"old": http.StatusOK, "stuck": http.StatusConflict} {
		r := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(`{}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set(receiver.DefaultKeyHeader, key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != want {
			t.Fatalf("key %s after the upgrade: %d %s, want %d", key, w.Code, w.Body.String(), want)
		}
	}
	var state string
	if err := pool.QueryRow(t.Context(), `SELECT state FROM drainer_receiver.records WHERE key = 'stuck'`).Scan(&state); err != nil || state != "outcome_unknown" {
		t.Fatalf("the abandoned record of the earlier version: state %q, %v; want outcome_unknown", state, err)
	}
}

// Receivers sharing a registerer share drainer_receiver_abandoned_total; a
// registerer holding another metric under that name is refused, naming the
// option.
func TestRegisterer(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(t.Context(), "postgres://u@127.0.0.1:1/db")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	reg := prometheus.NewRegistry()
	for range 2 {
		if _, err := receiver.New(pool, receiver.Options{Registerer: reg}); err != nil {
			t.Fatalf("a second receiver on the same registerer: %v", err)
		}
	}
	if n, err := testutil.GatherAndCount(reg, "drainer_receiver_abandoned_total"); err != nil || n != 2 {
		t.Fatalf("drainer_receiver_abandoned_total: %d series, %v; want its two outcomes at 0", n, err)
	}
	other := prometheus.NewRegistry()
	other.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "drainer_receiver_abandoned_total", Help: "not ours"}))
	if _, err := receiver.New(pool, receiver.Options{Registerer: other}); err == nil || !strings.Contains(err.Error(), "Registerer") {
		t.Fatalf("a registerer with a clashing metric: %v, want an error naming Registerer", err)
	}
}

func TestOptionsRejected(t *testing.T) {
	t.Parallel()
	if _, err := receiver.New(nil, receiver.Options{}); err == nil {
		t.Fatal("nil pool accepted")
	}
	pool, err := pgxpool.New(t.Context(), "postgres://u@127.0.0.1:1/db")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	_, err = receiver.New(pool, receiver.Options{Mode: "strict", TTL: -time.Second, MaxBody: -1})
	for _, want := range []string{"Mode", "TTL", "MaxBody"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
}

// A handler running longer than the recovery timeout keeps its record: the
// deadline moves forward while it runs, so a retry past the first deadline
// still answers in-flight, and the answer is stored under the moved token.
func TestLongHandlerKeptAlive(t *testing.T) {
	t.Parallel()
	f, entered, release, done := heldPost(t, receiver.Options{RecoveryTimeout: 3 * time.Second}, "slow")
	<-entered
	var first time.Time
	if err := f.pool.QueryRow(t.Context(), "SELECT locked_until FROM "+f.table).Scan(&first); err != nil {
		t.Fatal(err)
	}
	// Wait (generously) until the database clock is past the first deadline.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var past bool
		if err := f.pool.QueryRow(t.Context(), "SELECT now() > $1", first).Scan(&past); err != nil {
			t.Fatal(err)
		}
		if past {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the database clock never passed the first deadline")
		}
		time.Sleep(100 * time.Millisecond)
	}
	wantProblem(t, f.post("k", `{}`), http.StatusConflict, "in-flight")
	release()
	wantStatus(t, <-done, http.StatusCreated)
	w := f.post("k", `{}`)
	if w.Code != http.StatusOK || w.Body.String() != "slow" {
		t.Fatalf("after the slow handler: %d %q, want its stored answer", w.Code, w.Body.String())
	}
	f.wantRuns(1)
}

// TestHungExtensionDoesNotHoldTheAnswer: an extension of the record's
// recovery deadline that the database does not answer (a lock held by
// another transaction stands in for a connection that died without a
// word) is given up within its bound once the handler returned, so the
// answer does not wait for it; the answer is then stored as usual.
func TestHungExtensionDoesNotHoldTheAnswer(t *testing.T) {
	t.Parallel()
	f, entered, release, done := heldPost(t, receiver.Options{RecoveryTimeout: 3 * time.Second}, "done")
	<-entered
	tx, err := f.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(t.Context(), "SELECT 1 FROM "+f.table+" WHERE key = 'k' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	extending := func() int {
		var n int
		if err := f.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
		      WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%SET locked_until = now()%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	testkit.WaitFor(t, 2*time.Minute, "an extension waiting on the record's lock", func() (bool, string) { return extending() > 0, "" })
	release()
	// The bound is the extension's own (a second here); a minute is for
	// a loaded machine.
	testkit.WaitFor(t, time.Minute, "the waiting extension given up after the handler returned", func() (bool, string) {
		n := extending()
		return n == 0, fmt.Sprintf("%d extensions still waiting", n)
	})
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, <-done, http.StatusCreated)
	if w := f.post("k", `{}`); w.Code != http.StatusOK || w.Body.String() != "done" {
		t.Fatalf("after the handler: %d %q, want its stored answer", w.Code, w.Body.String())
	}
	f.wantRuns(1)
}
