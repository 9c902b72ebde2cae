//go:build integration

package integration

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/idemkey"
)

// recorder is a provider that records each request and answers 200.
type recorder struct {
	mu   sync.Mutex
	seen []recorded
}

type recorded struct {
	method, uri, body, key, contentType string
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rec.mu.Lock()
	rec.seen = append(rec.seen, recorded{method: r.Method, uri: r.RequestURI, body: string(body),
		key: r.Header.Get("Idempotency-Key"), contentType: r.Header.Get("Content-Type")})
	rec.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"ok":true}`)
}

// byKey returns the requests that carried key.
func (rec *recorder) byKey(key string) []recorded {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var out []recorded
	for _, s := range rec.seen {
		if s.key == key {
			out = append(out, s)
		}
	}
	return out
}

// TestImportedRoutesReachMethodAndPath imports the committed public OpenAPI
// documents (OpenAI, Box, Petstore) and a typical REST API whose bodies do
// not repeat the path's parameters (shop) with `drainer routes import`,
// passes the output through `drainer check`, drains rows with `drainer run`
// against a recording provider, and finds each row at its operation's
// method and path, with the payload as the body or, for the routes imported
// with body: without_path_fields, the payload without the path's fields;
// rows whose payload cannot fill the path fail unsent, without an attempt,
// naming the field.
func TestImportedRoutesReachMethodAndPath(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)

	const specs = "../internal/openapiroutes/testdata/"
	imported := func(file, adapter string) string {
		res := runCLI(t, nil, "routes", "import", "--openapi", specs+file, "--adapter", adapter)
		if res.code != 0 {
			t.Fatalf("routes import %s: %s", file, res)
		}
		_, routes, ok := strings.Cut(res.stdout, "routes:\n")
		if !ok {
			t.Fatalf("no routes: in %s", res.stdout)
		}
		return routes
	}
	// The box routes' detect probe points at the document's server: here,
	// the recorder (nothing leaves the machine).
	boxRoutes := strings.ReplaceAll(imported("box-comments-tasks-3.0.json", "box"), "https://api.box.com/2.0", srv.URL+"/box")
	shopRoutes := imported("shop-rest-3.0.yaml", "shop")
	cfg := fmt.Sprintf("workers: 4\nlease: 15s\nunrouted_recheck: 1s\nadapters:\n"+
		"  openai: {type: http, url: %q, timeout: 5s}\n  petstore: {type: http, url: %q, timeout: 5s}\n  box: {type: http, url: %q, timeout: 5s}\n"+
		"  shop: {type: http, url: %q, timeout: 5s}\nroutes:\n%s%s%s%s",
		srv.URL+"/v1", srv.URL+"/v2", srv.URL+"/box", srv.URL+"/shop", imported("openai-vector-stores-3.1.yaml", "openai"),
		imported("petstore-expanded-3.0.yaml", "petstore"), boxRoutes, shopRoutes)
	if !strings.Contains(cfg, "detect: {url: \""+srv.URL+"/box/comments/{key}\"}") {
		t.Fatalf("no detect probe imported:\n%s", cfg)
	}
	if n := strings.Count(shopRoutes, "body: without_path_fields"); n != 2 {
		t.Fatalf("%d shop routes with body: without_path_fields, want 2:\n%s", n, shopRoutes)
	}
	cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", cfg)
	if res := runCLI(t, nil, "check", "--config", cfgPath); res.code != 0 {
		t.Fatalf("check refuses the imported routes: %s\n%s", res, cfg)
	}

	dbURL, pool := newMigratedDB(t)
	type want struct {
		method, uri string
		body        bool
		sent        string // the body when it is not the payload
	}
	rows := []struct {
		tool, payload string
		want          *want // nil: the row fails unsent
		field         string
	}{
		{"createVectorStore", `{"name":"docs"}`, &want{"POST", "/v1/vector_stores", true, ""}, ""},
		{"modifyVectorStore", `{"vector_store_id":"vs_a/b?c#d","name":"renamed"}`, &want{"POST", "/v1/vector_stores/vs_a%2Fb%3Fc%23d", true, ""}, ""},
		{"deleteVectorStore", `{"vector_store_id":"vs 100%"}`, &want{"DELETE", "/v1/vector_stores/vs%20100%25", false, ""}, ""},
		{"deleteFile", `{"file_id":"../admin"}`, &want{"DELETE", "/v1/files/..%2Fadmin", false, ""}, ""},
		{"addPet", `{"name":"rex","tag":"dog"}`, &want{"POST", "/v2/pets", true, ""}, ""},
		{"deletePet", `{"id":42}`, &want{"DELETE", "/v2/pets/42", false, ""}, ""},
		{"post_comments", `{"message":"LGTM","item":{"id":"1","type":"file"}}`, &want{"POST", "/box/comments", true, ""}, ""},
		// delete_comments_id undoes post_comments: it reads the comment's
		// id from a compensation's payload, the forward call's answer
		{"delete_comments_id", `{"forward_key":"k","forward_response":{"id":"c/1"}}`, &want{"DELETE", "/box/comments/c%2F1", false, ""}, ""},
		{"post_tasks", `{"item":{"id":"1","type":"file"},"action":"review"}`, &want{"POST", "/box/tasks", true, ""}, ""},
		{"delete_tasks_id", `{"task_id":12345}`, &want{"DELETE", "/box/tasks/12345", false, ""}, ""},
		{"createOrder", `{"customer_id":"c-1","items":[{"sku":"a"}]}`, &want{"POST", "/shop/v1/orders", true, ""}, ""},
		{"updateOrderStatus", `{"order_id":"o/1 ?","status":"paid"}`, &want{"PUT", "/shop/v1/orders/o%2F1%20%3F", true, `{"status":"paid"}`}, ""},
		{"refundOrder", `{"order_id":"o-2","amount":500,"reason":"damaged"}`, &want{"POST", "/shop/v1/orders/o-2/refunds", true, `{"amount":500,"reason":"damaged"}`}, ""},
		{"deleteOrder", `{"order_id":"o-3"}`, &want{"DELETE", "/shop/v1/orders/o-3", false, ""}, ""},
		{"putAddress", `{"customer_id":7,"address_id":"home","line1":"1 Main St"}`, &want{"PUT", "/shop/v1/customers/7/addresses/home", true, ""}, ""},
		{"updateOrderStatus", `{"status":"paid"}`, nil, "{order_id}"},
		{"delete_tasks_id", `{"task_id":"a\u001fb"}`, nil, "{task_id}"},
		{"deletePet", `{"id":".."}`, nil, "{id}"},
		{"deletePet", `{"id":{"nested":1}}`, nil, "{id}"},
		{"modifyVectorStore", `{"name":"no id"}`, nil, "{vector_store_id}"},
		{"deleteFile", `{"file_id":null}`, nil, "{file_id}"},
	}
	// One run per row: a failed row aborts its run (routes are critical).
	keys := make([]string, len(rows))
	for i, r := range rows {
		keys[i] = enqueueOne(t, pool, idemkey.Tuple{AgentRunID: fmt.Sprint("run-rest-", i), StepID: "s", ToolName: r.tool, BusinessScope: "acct"}, r.payload)
	}

	d := startDaemon(t, "rest", "--config", cfgPath, "--database-url", dbURL)
	for i, r := range rows {
		status := "succeeded"
		if r.want == nil {
			status = "failed"
		}
		waitRowStatus(t, d, pool, keys[i], status, 60*time.Second)
	}
	for i, r := range rows {
		row := readRow(t, pool, keys[i])
		got := rec.byKey(keys[i])
		if r.tool == "post_comments" {
			// The box routes' probe calibrates itself, at start and every
			// few minutes, against a key of its route that succeeded: a GET
			// of this row's key that is not the row's request.
			got = slices.DeleteFunc(got, func(g recorded) bool {
				return g.method == http.MethodGet && g.uri == "/box/comments/"+url.PathEscape(keys[i])
			})
		}
		if r.want == nil {
			if len(got) != 0 || row.Attempts != 0 || row.LastError == nil || !strings.Contains(*row.LastError, r.field) {
				t.Errorf("%s %s: %d requests, attempts %d, last_error %v; want none, 0 and the field %s named",
					r.tool, r.payload, len(got), row.Attempts, strOrNil(row.LastError), r.field)
			}
			continue
		}
		if len(got) != 1 {
			t.Errorf("%s: %d requests, want 1", r.tool, len(got))
			continue
		}
		g := got[0]
		if g.method != r.want.method || g.uri != r.want.uri {
			t.Errorf("%s: sent %s %s, want %s %s", r.tool, g.method, g.uri, r.want.method, r.want.uri)
		}
		if sent := cmp.Or(r.want.sent, r.payload); r.want.body && (!sameJSON(g.body, sent) || g.contentType != "application/json") {
			t.Errorf("%s: body %q (%s), want %q", r.tool, g.body, g.contentType, sent)
		}
		if !r.want.body && (g.body != "" || g.contentType != "") {
			t.Errorf("%s: a DELETE sent body %q (%s)", r.tool, g.body, g.contentType)
		}
		if row.Attempts != 1 {
			t.Errorf("%s: attempts %d, want 1", r.tool, row.Attempts)
		}
	}
	// The refusals are audited as failed before dispatch, with no request.
	var unsent int
	if err := pool.QueryRow(context.Background(),
		`SELECT count(*) FROM drainer.audit WHERE response_status IS NULL AND to_status = 'failed' AND reason LIKE 'failed before dispatch: the payload cannot build%'`).Scan(&unsent); err != nil {
		t.Fatalf("read audit: %v", err)
	}
	if unsent != 6 {
		t.Errorf("%d audit entries of rows failed before dispatch, want 6", unsent)
	}
}

// sameJSON reports whether two JSON texts hold the same value (a payload
// is stored as jsonb, so its key order and spacing change).
func sameJSON(a, b string) bool {
	var va, vb any
	return json.Unmarshal([]byte(a), &va) == nil && json.Unmarshal([]byte(b), &vb) == nil && reflect.DeepEqual(va, vb)
}
