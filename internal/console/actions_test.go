package console

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// syncBuffer is a testkit.Buffer with the readings this package's tests make.
type syncBuffer struct{ testkit.Buffer }

// session opens a console session for actor and returns a client holding
// its cookie that does not follow redirects, and its CSRF token.
func (e *env) session(actor string) (*http.Client, string) {
	e.t.Helper()
	id, sess := e.srv.auth.open(actorOf(actor))
	jar, _ := cookiejar.New(nil)
	u, _ := url.Parse(e.http.URL)
	jar.SetCookies(u, []*http.Cookie{{Name: sessionCookie, Value: id, Path: "/"}})
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}, sess.csrf
}

// postNoFollow posts a form with c and returns the status, the Location
// and the body of the answer itself.
func postNoFollow(t testing.TB, c *http.Client, u string, v url.Values) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(v.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Location"), string(b)
}

// getWith fetches path with c and returns the status and body.
func getWith(t testing.TB, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, readAll(resp)
}

// fail sets the rows of keys failed one after the other, as their last
// attempts would (the first aborts its run, which cancels the run's
// never-attempted rows; a later one fails such a row all the same).
func (e *env) fail(keys ...string) {
	e.t.Helper()
	for _, k := range keys {
		e.exec(`UPDATE drainer.outbox SET status = 'failed', attempts = 3, first_attempt_at = now(), last_error = 'HTTP 500'
		        WHERE key = $1`, k)
	}
}

// auditCount is the number of audit entries of key.
func (e *env) auditCount(key string) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM drainer.audit WHERE key = $1`, key).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// keyLinks are the keys a page links to as rows, in page order.
func keyLinks(body string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`class="key"><a href="/rows/([^"?]+)`).FindAllStringSubmatch(body, -1) {
		k, _ := url.PathUnescape(m[1])
		out = append(out, k)
	}
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestBulkActsOnExactlyTheView: a bulk requeue of a view narrowed by the
// search box acts on the rows of that view only, and its dry run lists
// exactly them, as the list shows them.
func TestBulkActsOnExactlyTheView(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	a := append(e.enqueue("run-a1", "charge_card", "scope-a", 2), e.enqueue("run-a2", "charge_card", "scope-a", 1)...)
	b := e.enqueue("run-b1", "charge_card", "scope-b", 2)
	idle := e.enqueue("run-a3", "charge_card", "scope-a", 1)[0] // pending: outside status=failed
	e.fail(append(slices.Clone(a), b...)...)
	idleAudit := e.auditCount(idle)

	view := url.Values{"status": {"failed"}, "search": {"scope-a"}}
	var listed RowsPage
	e.getJSON("/api/v1/rows?"+view.Encode(), http.StatusOK, &listed)
	var inList []string
	for _, r := range listed.Rows {
		inList = append(inList, r.Key)
	}
	if !slices.Equal(sorted(inList), sorted(a)) || listed.Matched != "business_scope" {
		t.Fatalf("the view lists %v (search read as %q), want scope-a's failed rows %v", inList, listed.Matched, a)
	}

	// The API: the dry run lists exactly the view's rows, and the requeue
	// changes exactly them.
	jsonView := map[string]any{"status": "failed", "search": "scope-a", "dry_run": true}
	code, out := e.post("/api/v1/actions/requeue", jsonView, bearer)
	var wouldChange []string
	if res, _ := out["result"].(map[string]any); res != nil {
		for _, r := range res["rows"].([]any) {
			wouldChange = append(wouldChange, r.(map[string]any)["key"].(string))
		}
	}
	if code != http.StatusOK || !slices.Equal(sorted(wouldChange), sorted(a)) {
		t.Fatalf("dry run of the view: %d, would change %v, want exactly %v", code, wouldChange, a)
	}
	if code, out := e.post("/api/v1/actions/requeue", map[string]any{"confirm": out["id"]}, bearer); code != http.StatusOK {
		t.Fatalf("requeue of the view: %d %v", code, out)
	}
	for _, k := range a {
		if s := e.status(k); s != outbox.StatusPending {
			t.Errorf("scope-a row %s is %s after the requeue, want pending", k, s)
		}
	}
	for _, k := range b {
		if s := e.status(k); s != outbox.StatusFailed {
			t.Fatalf("scope-b row %s, outside the view, is %s: the requeue acted beyond the view", k, s)
		}
	}
	e.fail(a...)

	// The page's bulk form carries the search with the filters, and its
	// dry run and Confirm hold to the view the same way.
	c, csrf := e.session("bob")
	code, page := getWith(t, c, e.http.URL+"/rows?"+view.Encode())
	if code != http.StatusOK || !strings.Contains(page, `name="search" value="scope-a"`) || !strings.Contains(page, "Requeue all…") {
		t.Fatalf("rows page: %d, want a Requeue all… form carrying the search", code)
	}
	form := url.Values{"csrf": {csrf}, "dry_run": {"true"}, "back": {"/rows?" + view.Encode()}}
	for k, v := range view {
		form[k] = v
	}
	code, loc, _ := postNoFollow(t, c, e.http.URL+"/api/v1/actions/requeue", form)
	if code != http.StatusSeeOther || !strings.HasPrefix(loc, "/results/") {
		t.Fatalf("dry run: %d to %q, want 303 to its answer", code, loc)
	}
	code, dry := getWith(t, c, e.http.URL+loc)
	if code != http.StatusOK || !strings.Contains(dry, "Dry run: requeue") || !strings.Contains(dry, `<strong id="count">3</strong>`) {
		t.Fatalf("dry run page: %d, want a dry run of 3 rows\n%s", code, dry)
	}
	if got := keyLinks(dry); !slices.Equal(sorted(got), sorted(a)) {
		t.Fatalf("the dry run lists %v, want exactly the view's rows %v", got, a)
	}
	for _, k := range append(slices.Clone(a), b...) {
		if s := e.status(k); s != outbox.StatusFailed {
			t.Fatalf("the dry run changed %s to %s", k, s)
		}
	}
	m := regexp.MustCompile(`name="confirm" value="([0-9a-f]+)"`).FindStringSubmatch(dry)
	if m == nil || !strings.Contains(dry, ">Confirm</button>") {
		t.Fatal("the dry run page has no Confirm button naming it")
	}
	code, loc, _ = postNoFollow(t, c, e.http.URL+"/api/v1/actions/requeue", url.Values{"csrf": {csrf}, "confirm": {m[1]}})
	if code != http.StatusSeeOther || !strings.HasPrefix(loc, "/results/") {
		t.Fatalf("confirm: %d to %q, want 303 to its answer", code, loc)
	}
	code, done := getWith(t, c, e.http.URL+loc)
	if code != http.StatusOK || !strings.Contains(done, "Done: requeue") || !strings.Contains(done, `<strong id="count">3</strong>`) {
		t.Fatalf("confirm page: %d, want 3 rows requeued\n%s", code, done)
	}
	for _, k := range a {
		if s := e.status(k); s != outbox.StatusPending {
			t.Errorf("scope-a row %s is %s after the requeue, want pending", k, s)
		}
	}
	for _, k := range b {
		if s := e.status(k); s != outbox.StatusFailed {
			t.Errorf("scope-b row %s, outside the view, is %s: the requeue acted beyond the view", k, s)
		}
	}
	if s := e.status(idle); s != outbox.StatusPending || e.auditCount(idle) != idleAudit {
		t.Errorf("the pending row of scope-a, outside the view, was touched: %s, %d audit entries", s, e.auditCount(idle))
	}

	// A search that contradicts a filter holds no row: scope-a searched in
	// a view of scope-b.
	e.fail(a...)
	contra := url.Values{"status": {"failed"}, "scope": {"scope-b"}, "search": {"scope-a"}}
	e.getJSON("/api/v1/rows?"+contra.Encode(), http.StatusOK, &listed)
	if len(listed.Rows) != 0 {
		t.Errorf("scope-b searched for scope-a lists %d rows, want none", len(listed.Rows))
	}
	code, out = e.post("/api/v1/actions/requeue", map[string]any{"status": "failed", "scope": "scope-b", "search": "scope-a", "dry_run": true}, bearer)
	if code != http.StatusOK || out["result"].(map[string]any)["count"] != float64(0) {
		t.Errorf("requeue of scope-b searched for scope-a: %d %v, want no row", code, out)
	}
	if code, out := e.post("/api/v1/actions/requeue", map[string]any{"confirm": out["id"]}, bearer); code != http.StatusOK {
		t.Errorf("confirm of a dry run that found no row: %d %v", code, out)
	}
	for _, k := range append(slices.Clone(a), b...) {
		if s := e.status(k); s != outbox.StatusFailed {
			t.Errorf("%s is %s after a requeue of a view that holds no row", k, s)
		}
	}
}

// TestConfirmActsOnTheDryRunsRows: Confirm acts on the rows its dry run
// listed, each only while it still matches the view; a row that matches
// the view only after the dry run is left alone, and the dry run is
// confirmed at most once.
func TestConfirmActsOnTheDryRunsRows(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	first := e.enqueue("run-c1", "charge_card", "scope-c", 2)
	moved := e.enqueue("run-c2", "charge_card", "scope-c", 1)[0]
	e.fail(append(first, moved)...)
	code, out := e.post("/api/v1/actions/requeue", map[string]any{"status": "failed", "scope": "scope-c", "dry_run": true}, bearer)
	if code != http.StatusOK || out["result"].(map[string]any)["count"] != float64(3) {
		t.Fatalf("dry run: %d %v, want 3 rows", code, out)
	}
	id, _ := out["id"].(string)
	// After the dry run: a new row joins the view, and one of the dry
	// run's rows leaves it (cancelled by somebody else).
	late := e.enqueue("run-c3", "charge_card", "scope-c", 1)[0]
	e.fail(late)
	e.exec(`UPDATE drainer.outbox SET status = 'cancelled' WHERE key = $1`, moved)

	code, out = e.post("/api/v1/actions/requeue", map[string]any{"confirm": id}, bearer)
	if code != http.StatusOK {
		t.Fatalf("confirm: %d %v", code, out)
	}
	res := out["result"].(map[string]any)
	if res["count"] != float64(2) || out["confirms"] != id {
		t.Errorf("confirm: %v, want 2 rows requeued confirming %s", out, id)
	}
	if lo, _ := out["left_out"].([]any); len(lo) != 1 || lo[0] != moved {
		t.Errorf("left_out %v, want [%s], the row that left the view", out["left_out"], moved)
	}
	for _, k := range first {
		if s := e.status(k); s != outbox.StatusPending {
			t.Errorf("%s is %s, want pending", k, s)
		}
	}
	if s := e.status(late); s != outbox.StatusFailed {
		t.Errorf("the row that joined the view after the dry run is %s: Confirm acted beyond the dry run", s)
	}
	if s := e.status(moved); s != outbox.StatusCancelled {
		t.Errorf("the row that left the view is %s: Confirm overwrote it", s)
	}
	// Confirmed twice, or not a dry run of this verb: refused, and nothing
	// changes.
	confirmation, _ := out["id"].(string)
	before := e.auditCount(late)
	code, out = e.post("/api/v1/actions/requeue", map[string]any{"confirm": id}, bearer)
	if code != http.StatusConflict || !strings.Contains(out["error"].(string), "confirmed already") {
		t.Errorf("second confirm: %d %v, want 409", code, out)
	}
	for _, c := range []struct{ name, verb, id string }{
		{"an unknown id", "requeue", "0123456789abcdef"},
		{"another verb", "cancel", id},
		{"the answer of a confirmation", "requeue", confirmation},
	} {
		if code, out := e.post("/api/v1/actions/"+c.verb, map[string]any{"confirm": c.id}, bearer); code < 400 || code >= 500 {
			t.Errorf("confirm of %s: %d %v, want a 4xx", c.name, code, out)
		}
	}
	if e.status(late) != outbox.StatusFailed || e.auditCount(late) != before {
		t.Error("a refused confirmation changed a row")
	}
}

// TestActionAnswersByRedirect: every action's POST answers 303 to a page
// of its own; reading (and reloading) that page never acts again.
func TestActionAnswersByRedirect(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	keys := e.enqueue("run-p", "charge_card", "", 2)
	c, csrf := e.session("bob")
	act := e.http.URL + "/api/v1/actions/cancel"
	code, loc, _ := postNoFollow(t, c, act, url.Values{"csrf": {csrf}, "key": {keys[0]}, "back": {"/rows/" + keys[0]}})
	if code != http.StatusSeeOther || !regexp.MustCompile(`^/results/[0-9a-f]{32}$`).MatchString(loc) {
		t.Fatalf("cancel: %d to %q, want 303 to /results/{id}", code, loc)
	}
	if s := e.status(keys[0]); s != outbox.StatusCancelled {
		t.Fatalf("cancel: row %s", s)
	}
	audit := e.auditCount(keys[0])
	for range 3 { // the answer, then two reloads
		code, body := getWith(t, c, e.http.URL+loc)
		if code != http.StatusOK || !strings.Contains(body, "Done: cancel") || !strings.Contains(body, `href="/rows/`+keys[0]+`">← Back`) {
			t.Fatalf("GET %s: %d, want the cancel's answer with its way back\n%s", loc, code, body)
		}
	}
	if n := e.auditCount(keys[0]); n != audit || e.status(keys[0]) != outbox.StatusCancelled {
		t.Errorf("reloading the answer acted again: %d audit entries, want %d", n, audit)
	}

	// A refused action is answered the same way (a reload does not post
	// it again).
	code, loc, _ = postNoFollow(t, c, act, url.Values{"csrf": {csrf}, "key": {keys[0]}})
	if code != http.StatusSeeOther {
		t.Fatalf("refused cancel: %d, want 303", code)
	}
	if code, body := getWith(t, c, e.http.URL+loc); code != http.StatusConflict || !strings.Contains(body, "Refused") {
		t.Errorf("GET the refused cancel's answer: %d, want 409 with the refusal", code)
	}

	// JSON: 303 to the answer as JSON, the answer also in the body.
	b, _ := json.Marshal(map[string]any{"key": keys[1], "reason": "dup"})
	req, _ := http.NewRequest(http.MethodPost, act, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := (&http.Client{CheckRedirect: c.CheckRedirect}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(resp)
	loc = resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/api/v1/results/") || !strings.Contains(body, `"action":"cancel"`) {
		t.Fatalf("JSON cancel: %d to %q: %s, want 303 to its answer", resp.StatusCode, loc, body)
	}
	audit = e.auditCount(keys[1])
	var got ActionResult
	e.getJSON(loc, http.StatusOK, &got)
	e.getJSON(loc, http.StatusOK, &got)
	if got.Action != "cancel" || got.Key != keys[1] || got.Actor != "console:operator" || got.Result == nil || got.Result.Count != 1 {
		t.Errorf("the JSON answer: %+v", got)
	}
	if n := e.auditCount(keys[1]); n != audit {
		t.Errorf("reading the JSON answer acted again: %d audit entries, want %d", n, audit)
	}
	if code, _ := e.get("/results/ffffffffffffffffffffffffffffffff"); code != http.StatusNotFound {
		t.Errorf("an unknown answer: %d, want 404", code)
	}
}

// TestNextStaysInTheConsole: login's next (and an action's back) is a path
// of this console; anything a browser could read as another site falls
// back to the console's root.
func TestNextStaysInTheConsole(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	for _, c := range []struct{ next, want string }{
		{"/parked", "/parked"},
		{"/rows?status=failed&tool=charge_card", "/rows?status=failed&tool=charge_card"},
		{"/runs/a%2Fb%20c", "/runs/a%2Fb%20c"},
		{"/rows/idem_v1_0123456789abcdef0123456789abcdef", "/rows/idem_v1_0123456789abcdef0123456789abcdef"},
		{"/", "/"},
		{"", "/"},
		{"/\t/evil.example/", "/"},
		{"/\n/evil.example/", "/"},
		{"/\r\n/evil.example/", "/"},
		{"/ /evil.example", "/"},
		{"\t//evil.example", "/"},
		{"/\\evil.example", "/"},
		{"\\\\evil.example", "/"},
		{"/rows\\..\\..\\evil", "/"},
		{"//evil.example", "/"},
		{"///evil.example", "/"},
		{"https://evil.example/", "/"},
		{"http:/evil.example", "/"},
		{"evil.example", "/"},
		{"/%2F%2Fevil.example", "/"},
		{"/%2fevil.example", "/"},
		{"/%5Cevil.example", "/"},
		{"/%09/evil.example", "/"},
		{"/%0a/evil.example", "/"},
		{"javascript:alert(1)", "/"},
		{"/\u3000/evil.example", "/"},
		{"/\u2028/evil.example", "/"},
		{"/" + strings.Repeat("a", 5000), "/"},
	} {
		// Logins are rate-limited per address: each case starts afresh.
		e.srv.auth.mu.Lock()
		clear(e.srv.auth.limits)
		e.srv.auth.mu.Unlock()
		c0 := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		code, loc, _ := postNoFollow(t, c0, e.http.URL+"/login", url.Values{"token": {testToken}, "actor": {"bob"}, "next": {c.next}})
		if code != http.StatusSeeOther || loc != c.want {
			t.Errorf("login with next %q: %d to %q, want 303 to %q", c.next, code, loc, c.want)
		}
	}
	// The login page keeps only a safe next in its form.
	if _, body := e.get("/login?next=" + url.QueryEscape("/\t/evil.example")); !strings.Contains(body, `name="next" value="/"`) {
		t.Error("the login page keeps a next that leaves the console")
	}
	// An action's way back is held to the same rule.
	key := e.enqueue("run-n", "t", "", 1)[0]
	c, csrf := e.session("bob")
	_, loc, _ := postNoFollow(t, c, e.http.URL+"/api/v1/actions/cancel", url.Values{"csrf": {csrf}, "key": {key}, "back": {"/\t/evil.example"}})
	if _, body := getWith(t, c, e.http.URL+loc); !strings.Contains(body, `<a href="/">← Back</a>`) {
		t.Errorf("an action's back leaving the console is kept:\n%s", body)
	}
}

func (s *syncBuffer) lines(t testing.TB, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// TestActionLogNamesTargetAndActor: each action's log line names its
// actor and its target (the key, or the view and the count of a bulk
// action), never a payload filter's value.
func TestActionLogNamesTargetAndActor(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	var logs syncBuffer
	e.srv.log = slog.New(slog.NewJSONHandler(&logs, nil))
	key := e.enqueue("run-l0", "charge_card", "scope-l", 1)[0]
	if code, out := e.post("/api/v1/actions/cancel", map[string]any{"key": key}, bearer); code != http.StatusOK {
		t.Fatalf("cancel: %d %v", code, out)
	}
	// Two runs, each failed on its step s1 (customer c1).
	e.fail(e.enqueue("run-l1", "charge_card", "scope-l", 2)[1], e.enqueue("run-l2", "charge_card", "scope-l", 2)[1])
	code, out := e.post("/api/v1/actions/requeue", map[string]any{"status": "failed", "search": "scope-l",
		"payload": map[string]any{"customer": "c1"}, "dry_run": true}, bearer)
	if code != http.StatusOK {
		t.Fatalf("bulk requeue's dry run: %d %v", code, out)
	}
	if code, out := e.post("/api/v1/actions/requeue", map[string]any{"confirm": out["id"]}, bearer); code != http.StatusOK {
		t.Fatalf("bulk requeue: %d %v", code, out)
	}
	lines := logs.lines(t, "console action")
	if len(lines) != 3 {
		t.Fatalf("console action log lines: %v, want 3", lines)
	}
	one, dry, bulk := lines[0], lines[1], lines[2]
	if one["action"] != "cancel" || one["actor"] != "console:alice" || one["key"] != key {
		t.Errorf("single-row action logged as %v, want its action, actor and key", one)
	}
	for _, l := range []map[string]any{dry, bulk} {
		if l["action"] != "requeue" || l["actor"] != "console:alice" || l["count"] != float64(2) ||
			l["view"] != "status=failed payload=… search=scope-l (business_scope)" {
			t.Errorf("bulk action logged as %v, want its actor, view and count", l)
		}
	}
	if dry["dry_run"] != true || bulk["confirms"] != out["id"] {
		t.Errorf("the dry run logged as %v and its confirmation as %v, want dry_run and confirms naming it", dry, bulk)
	}
	if strings.Contains(logs.String(), "customer") {
		t.Error("the log holds the payload filter's value")
	}
}

// TestActionRefusesFieldsItDoesNotTake: an action's request with a field
// it does not take (a misspelled filter, a misspelled dry_run) is refused
// with 400 naming the field, and changes nothing: ignoring the filter
// would widen the view, ignoring dry_run would act. A flag that is not a
// boolean is refused too.
func TestActionRefusesFieldsItDoesNotTake(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	keys := e.enqueue("run-u1", "charge_card", "scope-u", 2)
	e.fail(keys...)
	for _, body := range []map[string]any{
		{"status": "failed", "toool": "x", "dry_run": true},
		{"status": "failed", "dryrun": true},
		{"key": keys[0], "dryrun": true},
		{"status": "failed", "dry_run": "yes"},
		{"key": keys[0], "ignore_retry_after": "sure"},
		{"confirm": "abc", "status": "failed", "tool": "y", "extra": 1},
	} {
		code, out := e.post("/api/v1/actions/requeue", body, bearer)
		msg, _ := out["error"].(string)
		if code != http.StatusBadRequest {
			t.Errorf("requeue %v: %d %v, want 400", body, code, out)
			continue
		}
		for k := range body {
			if (k == "toool" || k == "dryrun" || k == "extra") && !strings.Contains(msg, `"`+k+`"`) {
				t.Errorf("requeue %v refused with %q, which does not name %q", body, msg, k)
			}
		}
	}
	if code, out := e.post("/api/v1/actions/pause", map[string]any{"target": "route", "name": "charge_card", "key": keys[0]}, bearer); code != http.StatusBadRequest {
		t.Errorf("pause with a key: %d %v, want 400", code, out)
	}
	for _, k := range keys {
		if s := e.status(k); s != outbox.StatusFailed {
			t.Errorf("%s is %s after refused actions, want failed", k, s)
		}
	}
	if code, out := e.post("/api/v1/actions/requeue", map[string]any{"status": "failed", "tool": "charge_card", "dry_run": "on"}, bearer); code != http.StatusOK ||
		out["result"].(map[string]any)["count"] != float64(2) {
		t.Errorf("a dry run with dry_run \"on\" (a form's checkbox): %d %v, want both rows", code, out)
	}
}
