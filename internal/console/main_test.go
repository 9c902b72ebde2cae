package console

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/drainer-io/drainer/outbox"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

const testToken = "s3cret-console-token"

// env is a migrated test database and a console over it.
type env struct {
	t    testing.TB
	pool *pgxpool.Pool
	srv  *Server
	http *httptest.Server
}

func newEnv(t testing.TB, actions bool) *env {
	t.Helper()
	pool := storetest.NewPool(t)
	cfg := Config{Addr: "127.0.0.1:0", Actions: actions, Databases: []Database{{Name: "default", DB: pool, Store: store.MustNew("")}}}
	if actions {
		cfg.Token = testToken
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &env{t: t, pool: pool, srv: srv, http: hs}
}

// enqueue records steps s0…s(n-1) of run for tool in scope and returns
// their keys; step i has payload {"i": i, "customer": "c<i%2>"}.
func (e *env) enqueue(run, tool, scope string, n int) []string {
	e.t.Helper()
	ins := make([]store.Intent, n)
	for i := range ins {
		ins[i] = store.Intent{AgentRunID: run, StepID: "s" + strconv.Itoa(i), ToolName: tool, BusinessScope: scope,
			Payload: []byte(fmt.Sprintf(`{"i":%d,"customer":"c%d"}`, i, i%2))}
	}
	return storetest.EnqueueIntents(e.t, e.pool, ins)
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.pool.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

func (e *env) status(key string) outbox.Status {
	e.t.Helper()
	var s outbox.Status
	if err := e.pool.QueryRow(context.Background(), `SELECT status FROM drainer.outbox WHERE key = $1`, key).Scan(&s); err != nil {
		e.t.Fatal(err)
	}
	return s
}

// lastActor is the actor of key's newest audit entry.
func (e *env) lastActor(key string) string {
	e.t.Helper()
	var a string
	if err := e.pool.QueryRow(context.Background(), `SELECT actor FROM drainer.audit WHERE key = $1 ORDER BY id DESC LIMIT 1`, key).Scan(&a); err != nil {
		e.t.Fatal(err)
	}
	return a
}

// get fetches path and returns the status and body.
func (e *env) get(path string) (int, string) {
	e.t.Helper()
	resp, err := http.Get(e.http.URL + path)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// getJSON fetches an API path, checks its status and decodes its body.
func (e *env) getJSON(path string, want int, into any) {
	e.t.Helper()
	code, body := e.get(path)
	if code != want {
		e.t.Fatalf("GET %s: %d %s, want %d", path, code, body, want)
	}
	if into != nil {
		if err := json.Unmarshal([]byte(body), into); err != nil {
			e.t.Fatalf("GET %s: %v in %s", path, err, body)
		}
	}
}

// post sends a JSON action with the given headers.
func (e *env) post(path string, body map[string]any, hdr map[string]string) (int, map[string]any) {
	e.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, e.http.URL+path, strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &out); err != nil {
		e.t.Fatalf("POST %s: %d, not JSON: %s", path, resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

// postForm sends a form with a client (cookies) and returns status and body.
func postForm(t testing.TB, c *http.Client, u string, v url.Values, hdr map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(v.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, x := range hdr {
		req.Header.Set(k, x)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var bearer = map[string]string{"Authorization": "Bearer " + testToken, "X-Drainer-Actor": "alice"}

// recorderWriter is a minimal http.ResponseWriter for in-process requests.
type recorderWriter struct {
	code int
	hdr  http.Header
	body strings.Builder
}

func newRecorderWriter() *recorderWriter {
	return &recorderWriter{code: http.StatusOK, hdr: http.Header{}}
}

func (w *recorderWriter) Header() http.Header         { return w.hdr }
func (w *recorderWriter) WriteHeader(code int)        { w.code = code }
func (w *recorderWriter) Write(b []byte) (int, error) { return w.body.Write(b) }

func httptestRequest(path string) *http.Request {
	return httptest.NewRequest(http.MethodGet, path, nil)
}
