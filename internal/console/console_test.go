package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
)

func TestRowsFiltersSearchAndPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	keys := e.enqueue("run-a", "charge_card", "invoice-555", 5)
	e.enqueue("run-b", "send_email", "user-7", 3)

	var p RowsPage
	e.getJSON("/api/v1/rows?status=pending&limit=3", http.StatusOK, &p)
	if len(p.Rows) != 3 || p.NextAfter == 0 {
		t.Fatalf("first page: %d rows, next_after %d; want 3 and a cursor", len(p.Rows), p.NextAfter)
	}
	var p2 RowsPage
	e.getJSON("/api/v1/rows?status=pending&limit=3&after="+itoa(p.NextAfter), http.StatusOK, &p2)
	if len(p2.Rows) != 3 || p2.NextAfter == 0 || p2.Rows[0].Seq <= p.Rows[2].Seq {
		t.Fatalf("second page: %+v", p2)
	}
	var p3 RowsPage
	e.getJSON("/api/v1/rows?status=pending&limit=3&after="+itoa(p2.NextAfter), http.StatusOK, &p3)
	if len(p3.Rows) != 2 || p3.NextAfter != 0 {
		t.Fatalf("last page: %d rows, next_after %d; want 2 and 0", len(p3.Rows), p3.NextAfter)
	}

	for _, c := range []struct {
		query   string
		want    int
		matched string
	}{
		{"tool=charge_card", 5, ""},
		{"scope=user-7", 3, ""},
		{"run=run-b&tool=charge_card", 0, ""},
		{"payload=" + url.QueryEscape(`{"customer":"c1"}`), 3, ""},
		{"payload=" + url.QueryEscape(`{"customer":"c1"}`) + "&tool=charge_card", 2, ""},
		{"search=" + keys[2], 1, "key"},
		{"search=run-b", 3, "agent_run_id"},
		{"search=invoice-555", 5, "business_scope"},
		{"search=nothing-like-it", 0, "business_scope"},
		// Injection attempts are values, never SQL.
		{"tool=" + url.QueryEscape(`charge_card' OR '1'='1`), 0, ""},
		{"scope=" + url.QueryEscape(`x'; DROP TABLE drainer.outbox; --`), 0, ""},
		{"payload=" + url.QueryEscape(`{"i":"1' OR 1=1 --"}`), 0, ""},
	} {
		var got RowsPage
		e.getJSON("/api/v1/rows?"+c.query, http.StatusOK, &got)
		if len(got.Rows) != c.want || got.Matched != c.matched {
			t.Errorf("%s: %d rows matched by %q, want %d by %q", c.query, len(got.Rows), got.Matched, c.want, c.matched)
		}
	}
	for _, q := range []string{"status=" + url.QueryEscape("pending' OR 1=1 --"), "older_than=yesterday", "payload=" + url.QueryEscape("[1,2"),
		"payload=42", "after=-1", "limit=100000"} {
		code, body := e.get("/api/v1/rows?" + q)
		if code != http.StatusBadRequest || !strings.Contains(body, `"error"`) {
			t.Errorf("%s: %d %s, want 400 with an error", q, code, body)
		}
	}
	// An unknown database is not found, like an unknown key.
	if code, body := e.get("/api/v1/rows?database=other"); code != http.StatusNotFound || !strings.Contains(body, `unknown database \"other\"`) {
		t.Errorf("database=other: %d %s, want 404 naming it", code, body)
	}
	// The pages use the same functions.
	code, body := e.get("/rows?tool=send_email")
	if code != http.StatusOK || strings.Count(body, `class="key"><a href="/rows/`) != 3 {
		t.Errorf("rows page: %d, want 200 with 3 rows", code)
	}
	code, body = e.get("/rows?search=" + keys[0])
	if code != http.StatusOK || !strings.Contains(body, "Row <span class=\"key\">"+keys[0]) {
		t.Errorf("search by key: %d, want the row page", code)
	}
	if code, body = e.get("/rows?status=bogus"); code != http.StatusBadRequest || !strings.Contains(body, "unknown status") {
		t.Errorf("bad filter page: %d, want 400 naming the status", code)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestRowRunAndNotFound(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	keys := e.enqueue("run-r", "charge_card", "invoice-9", 2)
	e.exec(`UPDATE drainer.outbox SET status = 'in_flight', attempts = 1, lease_token = gen_random_uuid(),
	        lease_expires_at = now() + interval '30 seconds', leased_by = 'r1' WHERE key = $1`, keys[0])
	// The completion of a sent request, as store.Complete writes it.
	err := pgx.BeginFunc(context.Background(), e.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(context.Background(), `SELECT set_config('drainer.answer', 'on', true)`); err != nil {
			return err
		}
		_, err := tx.Exec(context.Background(), `UPDATE drainer.outbox SET status = 'pending', attempts = 1, lease_token = NULL,
		        lease_expires_at = NULL, response_status = 503, last_error = '503 Service Unavailable',
		        not_before = now() + interval '30 seconds', next_attempt_at = now() + interval '30 seconds' WHERE key = $1`, keys[0])
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	var d map[string]any
	e.getJSON("/api/v1/rows/"+keys[0], http.StatusOK, &d)
	if d["key"] != keys[0] || d["status"] != string(outbox.StatusPending) || d["tool_name"] != "charge_card" || d["business_scope"] != "invoice-9" {
		t.Fatalf("row: %v", d)
	}
	if d["audit_verified"] != true || d["not_before"] == nil || d["last_error"] != "503 Service Unavailable" {
		t.Errorf("row: audit_verified %v, not_before %v, last_error %v", d["audit_verified"], d["not_before"], d["last_error"])
	}
	attempts, _ := d["attempt_log"].([]any)
	if len(attempts) != 1 || attempts[0].(map[string]any)["response_status"] != float64(503) {
		t.Errorf("attempt_log: %v, want one attempt answered 503", d["attempt_log"])
	}
	if audit, _ := d["audit"].([]any); len(audit) < 2 {
		t.Errorf("audit: %v, want the enqueue and the attempt", d["audit"])
	}
	code, body := e.get("/rows/" + keys[0])
	if code != http.StatusOK || !strings.Contains(body, "chain verified") || !strings.Contains(body, "answer 503") {
		t.Errorf("row page: %d; want the verified chain and the 503 answer", code)
	}

	var run RunDetail
	e.getJSON("/api/v1/runs/run-r", http.StatusOK, &run)
	if len(run.Steps) != 2 || run.Saga != nil {
		t.Errorf("run: %+v", run)
	}
	for _, p := range []string{"/api/v1/rows/idem_v1_nope", "/api/v1/runs/no-such-run", "/api/v1/nothing"} {
		code, body := e.get(p)
		if code != http.StatusNotFound || !strings.Contains(body, `"error"`) {
			t.Errorf("%s: %d %s, want 404", p, code, body)
		}
	}
	for _, p := range []string{"/rows/idem_v1_nope", "/runs/no-such-run", "/runs/" + url.PathEscape("a/b c"), "/no/such/page"} {
		code, body := e.get(p)
		if code != http.StatusNotFound || !strings.Contains(body, "Not found") {
			t.Errorf("%s: %d, want the not-found page", p, code)
		}
	}
}

func TestLargePayloadTruncated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	key := e.enqueue("run-big", "upload", "", 1)[0]
	e.exec(`UPDATE drainer.outbox SET payload = jsonb_build_object('blob', repeat('x', 10 * 1024 * 1024)) WHERE key = $1`, key)
	code, body := e.get("/rows/" + key)
	if code != http.StatusOK || !strings.Contains(body, "Too large to show whole") {
		t.Fatalf("row page of a 10 MiB payload: %d, want the truncated view", code)
	}
	if len(body) > 512<<10 {
		t.Errorf("row page of a 10 MiB payload is %d bytes; want well under 512 KiB", len(body))
	}
	var d map[string]any
	e.getJSON("/api/v1/rows/"+key, http.StatusOK, &d)
	if d["payload_truncated"] != true || d["payload"] != nil || d["payload_bytes"].(float64) < 10<<20 {
		t.Errorf("API: payload_truncated %v, payload_bytes %v", d["payload_truncated"], d["payload_bytes"])
	}
}

func TestActionsNeedTheTokenAndTheSameSite(t *testing.T) {
	t.Parallel()
	ro := newEnv(t, false)
	key := ro.enqueue("run-ro", "t", "", 1)[0]
	if code, out := ro.post("/api/v1/actions/cancel", map[string]any{"key": key}, bearer); code != http.StatusForbidden {
		t.Errorf("read-only console: %d %v, want 403", code, out)
	}
	// The API's form body gets the API's JSON error too, not a page.
	req, _ := http.NewRequest(http.MethodPost, ro.http.URL+"/api/v1/actions/cancel", strings.NewReader(url.Values{"key": {key}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range bearer {
		req.Header.Set(k, v)
	}
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || !strings.Contains(string(b), `"error"`) {
			t.Errorf("read-only console, a form with the bearer token: %d %s %s; want 403 and a JSON error", resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
	}
	e := newEnv(t, true)
	key = e.enqueue("run-1", "t", "", 1)[0]
	for name, hdr := range map[string]map[string]string{
		"no token":          nil,
		"wrong token":       {"Authorization": "Bearer nope"},
		"basic, not bearer": {"Authorization": "Basic " + testToken},
	} {
		if code, out := e.post("/api/v1/actions/cancel", map[string]any{"key": key}, hdr); code != http.StatusUnauthorized {
			t.Errorf("%s: %d %v, want 401", name, code, out)
		}
	}
	for name, hdr := range map[string]map[string]string{
		"Sec-Fetch-Site cross-site": {"Sec-Fetch-Site": "cross-site"},
		"Sec-Fetch-Site same-site":  {"Sec-Fetch-Site": "same-site"},
		"foreign Origin":            {"Origin": "https://evil.example"},
		"null Origin":               {"Origin": "null"},
	} {
		h := map[string]string{"Authorization": "Bearer " + testToken}
		for k, v := range hdr {
			h[k] = v
		}
		if code, out := e.post("/api/v1/actions/cancel", map[string]any{"key": key}, h); code != http.StatusForbidden {
			t.Errorf("%s: %d %v, want 403", name, code, out)
		}
	}
	if code, _ := e.get("/api/v1/actions/cancel?key=" + key); code != http.StatusMethodNotAllowed && code != http.StatusNotFound {
		t.Errorf("GET on an action: %d, want 405 or 404", code)
	}
	if s := e.status(key); s != outbox.StatusPending {
		t.Fatalf("a refused action changed the row: %s", s)
	}
	code, out := e.post("/api/v1/actions/cancel", map[string]any{"key": key, "reason": "wrong customer"}, bearer)
	if code != http.StatusOK || e.status(key) != outbox.StatusCancelled {
		t.Fatalf("cancel with the token: %d %v, row %s", code, out, e.status(key))
	}
	if a := e.lastActor(key); a != "console:alice" {
		t.Errorf("audited actor %q, want console:alice", a)
	}
	// A refused transition names the row's status.
	code, out = e.post("/api/v1/actions/cancel", map[string]any{"key": key}, bearer)
	if code != http.StatusConflict || !strings.Contains(out["error"].(string), "cancelled") {
		t.Errorf("cancel of a cancelled row: %d %v, want 409 naming its status", code, out)
	}
}

func TestSessionLoginCSRFAndRateLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	key := e.enqueue("run-s", "t", "", 1)[0]
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	code, _ := postForm(t, c, e.http.URL+"/login", url.Values{"token": {"wrong"}, "actor": {"bob"}}, nil)
	if code != http.StatusUnauthorized {
		t.Fatalf("login with a wrong token: %d, want 401", code)
	}
	code, _ = postForm(t, c, e.http.URL+"/login", url.Values{"token": {testToken}, "actor": {"bob"}}, map[string]string{"Origin": "https://evil.example"})
	if code != http.StatusForbidden {
		t.Fatalf("cross-site login: %d, want 403", code)
	}
	req, _ := http.NewRequest(http.MethodPost, e.http.URL+"/login", strings.NewReader(url.Values{"token": {testToken}, "actor": {"bob"}, "next": {"/parked"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/parked" {
		t.Fatalf("login: %d to %q, want 303 to /parked", resp.StatusCode, resp.Header.Get("Location"))
	}
	sc := resp.Header.Get("Set-Cookie")
	for _, attr := range []string{"HttpOnly", "SameSite=Strict", "Path=/"} {
		if !strings.Contains(sc, attr) {
			t.Errorf("session cookie %q lacks %s", sc, attr)
		}
	}
	if strings.Contains(sc, testToken) {
		t.Fatal("the session cookie holds the token")
	}
	// The row page now carries the form token.
	resp, err = c.Get(e.http.URL + "/rows/" + key)
	if err != nil {
		t.Fatal(err)
	}
	page := readAll(resp)
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(page)
	if m == nil || !strings.Contains(page, ">Cancel</button>") {
		t.Fatal("the row page of a session has no CSRF token or no Cancel button")
	}
	act := e.http.URL + "/api/v1/actions/cancel"
	if code, _ := postForm(t, c, act, url.Values{"key": {key}}, nil); code != http.StatusForbidden {
		t.Errorf("session action without the CSRF token: %d, want 403", code)
	}
	if code, _ := postForm(t, c, act, url.Values{"key": {key}, "csrf": {strings.Repeat("0", 64)}}, nil); code != http.StatusForbidden {
		t.Errorf("session action with a wrong CSRF token: %d, want 403", code)
	}
	if code, _ := postForm(t, c, act, url.Values{"key": {key}, "csrf": {m[1]}}, map[string]string{"Sec-Fetch-Site": "cross-site"}); code != http.StatusForbidden {
		t.Errorf("cross-site session action: %d, want 403", code)
	}
	if s := e.status(key); s != outbox.StatusPending {
		t.Fatalf("a refused action changed the row: %s", s)
	}
	code, _ = postForm(t, c, act, url.Values{"key": {key}, "csrf": {m[1]}, "reason": {"duplicate"}}, map[string]string{"Sec-Fetch-Site": "same-origin"})
	if code != http.StatusSeeOther || e.status(key) != outbox.StatusCancelled {
		t.Fatalf("session action: %d, row %s; want 303 to its answer", code, e.status(key))
	}
	if a := e.lastActor(key); a != "console:bob" {
		t.Errorf("audited actor %q, want console:bob", a)
	}
	// Logins are rate-limited per client address.
	limited := false
	for range loginBurst + 2 {
		if code, _ := postForm(t, &http.Client{}, e.http.URL+"/login", url.Values{"token": {"guess"}}, nil); code == http.StatusTooManyRequests {
			limited = true
		}
	}
	if !limited {
		t.Error("repeated wrong logins were never rate-limited")
	}
}

func readAll(resp *http.Response) string {
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

func TestBulkRequeueDryRunThenConfirm(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	keys := e.enqueue("run-f", "charge_card", "", 4)
	other := e.enqueue("run-g", "send_email", "", 1)
	for _, k := range append(keys, other...) {
		e.exec(`UPDATE drainer.outbox SET status = 'failed', attempts = 3, first_attempt_at = now() WHERE key = $1`, k)
	}
	filter := map[string]any{"status": "failed", "tool": "charge_card", "dry_run": true}
	code, out := e.post("/api/v1/actions/requeue", filter, bearer)
	if code != http.StatusOK {
		t.Fatalf("dry run: %d %v", code, out)
	}
	res := out["result"].(map[string]any)
	if res["dry_run"] != true || res["count"] != float64(4) {
		t.Fatalf("dry run: %v, want 4 rows", res)
	}
	for _, k := range keys {
		if s := e.status(k); s != outbox.StatusFailed {
			t.Fatalf("the dry run changed %s to %s", k, s)
		}
	}
	delete(filter, "dry_run")
	if code, out := e.post("/api/v1/actions/requeue", filter, bearer); code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(out["error"]), "dry run first") {
		t.Fatalf("bulk requeue without its dry run: %d %v, want 400 saying a dry run comes first", code, out)
	}
	for _, k := range keys {
		if s := e.status(k); s != outbox.StatusFailed {
			t.Fatalf("a bulk requeue without its dry run changed %s to %s", k, s)
		}
	}
	code, out = e.post("/api/v1/actions/requeue", map[string]any{"confirm": out["id"]}, bearer)
	if code != http.StatusOK || out["result"].(map[string]any)["count"] != float64(4) {
		t.Fatalf("confirm: %d %v", code, out)
	}
	for _, k := range keys {
		if s := e.status(k); s != outbox.StatusPending {
			t.Errorf("%s is %s after the bulk requeue", k, s)
		}
	}
	if s := e.status(other[0]); s != outbox.StatusFailed {
		t.Errorf("a row outside the filter was requeued: %s", s)
	}
	if code, out := e.post("/api/v1/actions/requeue", map[string]any{"tool": "charge_card", "dry_run": true}, bearer); code != http.StatusBadRequest {
		t.Errorf("bulk requeue without a status: %d %v, want 400", code, out)
	}
}

func TestResolvePauseResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	key := e.enqueue("run-u", "ship_order", "", 1)[0]
	e.exec(`UPDATE drainer.outbox SET status = 'outcome_unknown', attempts = 1, first_attempt_at = now(),
	        last_error = 'timeout after the request was sent' WHERE key = $1`, key)
	if code, out := e.post("/api/v1/actions/resolve", map[string]any{"key": key, "outcome": "succeeded"}, bearer); code != http.StatusBadRequest {
		t.Errorf("resolve without a note: %d %v, want 400", code, out)
	}
	code, out := e.post("/api/v1/actions/resolve", map[string]any{"key": key, "outcome": "succeeded", "note": "checked the provider: shipped"}, bearer)
	if code != http.StatusOK || e.status(key) != outbox.StatusSucceeded {
		t.Fatalf("resolve: %d %v, row %s", code, out, e.status(key))
	}
	if a := e.lastActor(key); a != "console:alice" {
		t.Errorf("audited actor %q", a)
	}
	code, out = e.post("/api/v1/actions/resolve", map[string]any{"key": key, "outcome": "failed", "note": "again"}, bearer)
	if code != http.StatusConflict || out["refused"] == nil {
		t.Errorf("second resolve: %d %v, want 409 with the refusal", code, out)
	}
	if code, out := e.post("/api/v1/actions/pause", map[string]any{"name": "ship_order", "reason": "provider incident"}, bearer); code != http.StatusOK {
		t.Fatalf("pause: %d %v", code, out)
	}
	var ps []map[string]any
	e.getJSON("/api/v1/pauses", http.StatusOK, &ps)
	if len(ps) != 1 || ps[0]["name"] != "ship_order" || ps[0]["paused_by"] != "console:alice" {
		t.Fatalf("pauses: %v", ps)
	}
	if code, _ := e.post("/api/v1/actions/pause", map[string]any{"name": "ship_order"}, bearer); code != http.StatusConflict {
		t.Errorf("pausing twice: %d, want 409", code)
	}
	if code, out := e.post("/api/v1/actions/resume", map[string]any{"name": "ship_order"}, bearer); code != http.StatusOK {
		t.Fatalf("resume: %d %v", code, out)
	}
	e.getJSON("/api/v1/pauses", http.StatusOK, &ps)
	if len(ps) != 0 {
		t.Errorf("pauses after resume: %v", ps)
	}
	if code, _ := e.post("/api/v1/actions/explode", map[string]any{}, bearer); code != http.StatusNotFound {
		t.Errorf("unknown action: %d, want 404", code)
	}
}

func TestStatsAndSecurityHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	e.enqueue("run-st", "charge_card", "", 3)
	e.srv.stats.sample(context.Background())
	e.srv.stats.sample(context.Background())
	var st Stats
	e.getJSON("/api/v1/stats", http.StatusOK, &st)
	if st.RowsByStatus[string(outbox.StatusPending)] != 3 || len(st.RowsByTool) != 1 || st.RowsByTool[0].Tool != "charge_card" || len(st.History) != 2 {
		t.Fatalf("stats: %+v", st)
	}
	resp, err := http.Get(e.http.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(resp)
	csp := resp.Header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") || resp.Header.Get("X-Frame-Options") != "DENY" {
		t.Errorf("security headers: CSP %q, X-Frame-Options %q", csp, resp.Header.Get("X-Frame-Options"))
	}
	if strings.Contains(body, "<script>") || !strings.Contains(body, `<label for="search">Search</label>`) || !strings.Contains(body, "backlog-chart") {
		t.Error("overview: inline script, or no Search box, or no chart")
	}
	if strings.Contains(body, `name="database"`) {
		t.Error("a database selector with one database")
	}
}

func TestAddressInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = Listen(ln.Addr().String())
	var ae *AddrInUseError
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Fatalf("listen on a taken address: %v, want an AddrInUseError naming it", err)
	}
}

func TestExpiredSessionAndRacedAction(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	key := e.enqueue("run-x", "t", "", 1)[0]
	id, sess := e.srv.auth.open("console:carol")
	sess.expires = time.Now().Add(-time.Minute) // an expired session
	jar, _ := cookiejar.New(nil)
	u, _ := url.Parse(e.http.URL)
	jar.SetCookies(u, []*http.Cookie{{Name: sessionCookie, Value: id, Path: "/"}})
	c := &http.Client{Jar: jar}
	code, body := postForm(t, c, e.http.URL+"/api/v1/actions/cancel", url.Values{"key": {key}, "csrf": {sess.csrf}}, nil)
	if code != http.StatusUnauthorized || !strings.Contains(body, "log in") {
		t.Errorf("action with an expired session: %d, want 401 asking to log in", code)
	}
	// A daemon claimed the row meanwhile: its lease wins, and the page says so.
	e.exec(`UPDATE drainer.outbox SET status = 'in_flight', attempts = 1, lease_token = gen_random_uuid(),
	        lease_expires_at = now() + interval '30 seconds', leased_by = 'replica-2' WHERE key = $1`, key)
	id, sess = e.srv.auth.open("console:carol")
	jar.SetCookies(u, []*http.Cookie{{Name: sessionCookie, Value: id, Path: "/"}})
	code, body = postForm(t, c, e.http.URL+"/api/v1/actions/cancel", url.Values{"key": {key}, "csrf": {sess.csrf}}, nil)
	if code != http.StatusConflict || !strings.Contains(body, "is now <span class=\"st st-in_flight\">in_flight</span>") {
		t.Errorf("cancel of a row a daemon holds: %d, want 409 saying it is in_flight\n%s", code, body)
	}
	if s := e.status(key); s != outbox.StatusInFlight {
		t.Errorf("the refused cancel changed the row to %s", s)
	}
}

func TestDatabaseSelectorOnlyWithMany(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	e.enqueue("run-db", "t", "", 2)
	st := e.srv.cfg.Databases[0].Store
	two, err := New(Config{Addr: "127.0.0.1:0", Databases: []Database{
		{Name: "eu", DB: e.pool, Store: st}, {Name: "us", DB: e.pool, Store: st}}})
	if err != nil {
		t.Fatal(err)
	}
	w := newRecorderWriter()
	two.Handler().ServeHTTP(w, httptestRequest("/rows?database=us"))
	body := w.body.String()
	if w.code != http.StatusOK || !strings.Contains(body, `<select id="database" name="database">`) || !strings.Contains(body, "<option selected>us</option>") {
		t.Errorf("two databases: %d, want a selector with us selected", w.code)
	}
	w = newRecorderWriter()
	two.Handler().ServeHTTP(w, httptestRequest("/api/v1/rows?database=asia"))
	if w.code != http.StatusNotFound || !strings.Contains(w.body.String(), `unknown database \"asia\"`) {
		t.Errorf("unknown database: %d %s, want 404 naming it", w.code, w.body.String())
	}
	w = newRecorderWriter()
	two.Handler().ServeHTTP(w, httptestRequest("/api/v1/rows?database=eu"))
	var p RowsPage
	if err := json.Unmarshal([]byte(w.body.String()), &p); err != nil || p.Database != "eu" || len(p.Rows) != 2 {
		t.Errorf("rows of eu: %s", w.body.String())
	}
}

// TestTextNoKeyCanBeIsRefused: a path or query holding a NUL byte or bytes
// that are not UTF-8, or a payload filter the database cannot store, is the
// request's fault: 400, and nothing logged as the console's error. Before,
// each was a 500 and an ERROR line in the log, for anyone who could reach
// the console.
func TestTextNoKeyCanBeIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	e.enqueue("run-t", "charge_card", "", 1)
	var logs testkit.Buffer
	e.srv.log = slog.New(slog.NewTextHandler(&logs, nil))
	for _, p := range []string{"/api/v1/rows/%00", "/api/v1/runs/%ff%fe", "/api/v1/rows?search=%00", "/api/v1/rows?run=%ff",
		"/api/v1/rows?scope=a%00b", "/rows/%00", "/runs/%ff", "/api/v1/rows?payload=" + url.QueryEscape(`{"a":"\u0000"}`)} {
		code, body := e.get(p)
		if code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", p, code, body)
		}
		if strings.HasPrefix(p, "/api/") && !strings.Contains(body, `"error"`) {
			t.Errorf("%s: %s, want a JSON error", p, body)
		}
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("bad input logged as the console's error:\n%s", logs.String())
	}
	if code, _ := e.get("/api/v1/rows?run=run-t"); code != http.StatusOK {
		t.Errorf("a good filter: %d", code)
	}
}

// TestBearerGuessesAreRateLimited: refused bearer tokens spend the same
// per-address budget as wrong logins, so the token cannot be guessed
// through the API faster than through the login form: past it, a token
// waits (429) and nothing is changed; accepted tokens spend nothing.
func TestBearerGuessesAreRateLimited(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	key := e.enqueue("run-g", "t", "", 1)[0]
	for range 10 { // accepted tokens spend nothing
		if code, out := e.post("/api/v1/actions/pause", map[string]any{"target": "route", "name": "t", "reason": "r"}, bearer); code != http.StatusOK && code != http.StatusConflict {
			t.Fatalf("pause with the token: %d %v", code, out)
		}
	}
	limited := 0
	for i := range loginBurst + 3 {
		code, _ := e.post("/api/v1/actions/cancel", map[string]any{"key": key}, map[string]string{"Authorization": "Bearer guess" + strconv.Itoa(i)})
		if code == http.StatusTooManyRequests {
			limited++
		} else if code != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d, want 401 or 429", i, code)
		}
	}
	if limited == 0 {
		t.Fatalf("%d refused bearer tokens were never rate-limited", loginBurst+3)
	}
	if s := e.status(key); s != outbox.StatusPending {
		t.Fatalf("row %s after refused requests", s)
	}
}
