package console

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store/storetest"
)

// lookedUp is what the tests read of GET /api/v1/rows/{key}.
type lookedUp struct {
	Key      string   `json:"key"`
	Database string   `json:"database"`
	Unread   []string `json:"databases_unread"`
}

// listed is what the tests read of GET /api/v1/rows.
type listed struct {
	Rows []struct {
		Key      string `json:"key"`
		Database string `json:"database"`
	} `json:"rows"`
	NextCursor string   `json:"next_cursor"`
	Unread     []string `json:"databases_unread"`
}

// TestFleetLookupFindsTheKey: with a fleet and no database named, a key
// looked up (the API, its page, the search box) is found in the database
// holding it, never looked for in the first only; a key in two databases
// shows both, each naming its database; a key in none is a 404 saying
// every database was searched; a database that cannot be read is named.
func TestFleetLookupFindsTheKey(t *testing.T) {
	e, f := newFleetEnv(t, []string{"a", "b", "c"}, nil)
	keys := storetest.Enqueue(t, f.pools["b"], "run-1", "charge", 2)
	var row lookedUp
	e.getJSON("/api/v1/rows/"+url.PathEscape(keys[0]), http.StatusOK, &row)
	if row.Key != keys[0] || row.Database != "b" {
		t.Errorf("GET /api/v1/rows/%s without a database: %+v, want it from b", keys[0], row)
	}
	for _, path := range []string{"/rows/" + url.PathEscape(keys[0]), "/rows?search=" + url.QueryEscape(keys[0])} {
		code, body := e.get(path)
		if code != http.StatusOK || !strings.Contains(body, `Row <span class="key">`+keys[0]) || !strings.Contains(body, `href="/runs/run-1?database=b"`) {
			t.Errorf("%s without a database: %d, want b's row page, its links naming b:\n%s", path, code, body)
		}
	}
	// The same tuple in c: the same key in two databases.
	if again := storetest.Enqueue(t, f.pools["c"], "run-1", "charge", 2); again[1] != keys[1] {
		t.Fatalf("keys %v in c, want %v", again, keys)
	}
	code, body := e.get("/api/v1/rows/" + url.PathEscape(keys[1]))
	if code != http.StatusConflict || !strings.Contains(body, "b, c") || !strings.Contains(body, `"databases":["b","c"]`) {
		t.Errorf("GET /api/v1/rows/%s, in b and c: %d %s, want 409 naming both", keys[1], code, body)
	}
	for _, path := range []string{"/rows/" + url.PathEscape(keys[1]), "/rows?search=" + url.QueryEscape(keys[1])} {
		code, body := e.get(path)
		for _, db := range []string{"b", "c"} {
			if code != http.StatusOK || !strings.Contains(body, `href="/rows/`+url.PathEscape(keys[1])+`?database=`+db+`"`) {
				t.Errorf("%s, in b and c: %d, want both rows listed, %s's among them:\n%s", path, code, db, body)
			}
		}
	}
	code, body = e.get("/api/v1/rows/idem_v1_nope")
	if code != http.StatusNotFound || !strings.Contains(body, "any of the 3 databases") {
		t.Errorf("GET an unknown key: %d %s, want 404 naming every database searched", code, body)
	}
	if code, body := e.get("/rows/idem_v1_nope"); code != http.StatusNotFound || !strings.Contains(body, "any of the 3 databases") {
		t.Errorf("the page of an unknown key: %d, want 404 naming every database searched:\n%s", code, body)
	}
	// The first database down: b's key is found still, a named as unread;
	// a key found nowhere else is not said to be nowhere.
	only := storetest.Enqueue(t, f.pools["b"], "run-2", "charge", 1)[0]
	f.setDown("a", true)
	e.getJSON("/api/v1/rows/"+url.PathEscape(only), http.StatusOK, &row)
	if row.Key != only || row.Database != "b" || len(row.Unread) != 1 || !strings.HasPrefix(row.Unread[0], "a: ") {
		t.Errorf("GET b's key with a down: %+v, want it from b, a named as unread", row)
	}
	if code, body := e.get("/rows/" + url.PathEscape(only)); code != http.StatusOK || !strings.Contains(body, `data-unread>Not read, so left out of this page: a: `) {
		t.Errorf("b's row page with a down: %d, want the row, a named as unread:\n%s", code, body)
	}
	code, body = e.get("/api/v1/rows/idem_v1_nope")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "a (") {
		t.Errorf("GET an unknown key with a down: %d %s, want 503 naming a", code, body)
	}
}

// TestFleetListsEveryDatabase: with a fleet and no database named, the
// rows list and the parked rows hold every database's rows, each naming
// its database, paged with a cursor that neither skips nor repeats a row;
// a database that cannot be read is named on the page, the others shown.
func TestFleetListsEveryDatabase(t *testing.T) {
	e, f := newFleetEnv(t, []string{"a", "b", "c"}, nil)
	want := map[string]string{} // key → database
	for i, db := range []string{"a", "b", "c"} {
		for _, k := range storetest.Enqueue(t, f.pools[db], "run-"+db, "charge", 2+i) {
			want[k] = db
		}
	}
	parked := map[string]string{}
	for _, db := range []string{"b", "c"} {
		k := storetest.Insert(t, f.pools[db], storetest.Row{AgentRunID: "run-p-" + db, Status: outbox.StatusOutcomeUnknown, Attempts: 1})
		parked[k], want[k] = db, db
	}
	// Every row, two a page, each once with its database.
	got := map[string]string{}
	for path, pages := "/api/v1/rows?limit=2", 0; ; pages++ {
		var page listed
		e.getJSON(path, http.StatusOK, &page)
		for _, r := range page.Rows {
			if _, dup := got[r.Key]; dup {
				t.Errorf("%s: %s listed again", path, r.Key)
			}
			got[r.Key] = r.Database
		}
		if page.NextCursor == "" || pages > 10 {
			break
		}
		path = "/api/v1/rows?limit=2&cursor=" + url.QueryEscape(page.NextCursor)
	}
	if len(got) != len(want) {
		t.Errorf("the fleet's rows: %d, want %d: %v", len(got), len(want), got)
	}
	for k, db := range want {
		if got[k] != db {
			t.Errorf("row %s listed in %q, want %s", k, got[k], db)
		}
	}
	var outcome listed
	e.getJSON("/api/v1/rows?status=outcome_unknown", http.StatusOK, &outcome)
	if len(outcome.Rows) != 2 {
		t.Errorf("the fleet's outcome_unknown rows: %+v, want b's and c's", outcome.Rows)
	}
	if code, body := e.get("/api/v1/rows?after=3"); code != http.StatusBadRequest || !strings.Contains(body, "cursor") {
		t.Errorf("after= over the whole fleet: %d %s, want 400 pointing at cursor", code, body)
	}
	_, body := e.get("/rows")
	if !strings.Contains(body, "<th>Database</th>") {
		t.Errorf("the fleet's rows page: no database column:\n%s", body)
	}
	// The page's next link goes on with the cursor, its filters kept.
	_, first := e.get("/rows?limit=2&tool=charge")
	m := regexp.MustCompile(`rel="next" href="([^"]+)"`).FindStringSubmatch(first)
	if m == nil {
		t.Fatalf("the fleet's rows page, two a page: no next link:\n%s", first)
	}
	next, err := url.Parse(html.UnescapeString(m[1]))
	if q := next.Query(); err != nil || next.Path != "/rows" || q.Get("cursor") == "" || q.Get("limit") != "2" || q.Get("tool") != "charge" {
		t.Errorf("the next link %s: want /rows with its cursor, limit and tool", m[1])
	}
	_, parkedPage := e.get("/parked")
	for k, db := range parked {
		link := `href="/rows/` + url.PathEscape(k) + `?database=` + db + `"`
		if !strings.Contains(body, link) || !strings.Contains(parkedPage, link) {
			t.Errorf("the fleet's rows and parked pages: want %s's row %s, linked in its database", db, k)
		}
	}
	// One database down: the others shown, it named.
	f.setDown("b", true)
	inB := 0
	for _, db := range want {
		if db == "b" {
			inB++
		}
	}
	var partial listed
	e.getJSON("/api/v1/rows?limit=500", http.StatusOK, &partial)
	if len(partial.Rows) != len(want)-inB || len(partial.Unread) != 1 || !strings.HasPrefix(partial.Unread[0], "b: ") {
		t.Errorf("the fleet's rows with b down: %d rows, unread %v; want %d, b named", len(partial.Rows), partial.Unread, len(want)-inB)
	}
	for _, path := range []string{"/rows", "/parked", "/rows?search=run-c"} {
		code, body := e.get(path)
		if code != http.StatusOK || !strings.Contains(body, `data-unread>Not read, so left out of this page: b: `) || !strings.Contains(body, "?database=c") {
			t.Errorf("%s with b down: %d, want c's rows and b named as unread:\n%s", path, code, body)
		}
	}
}

// TestOneDatabaseListUnchanged: without a fleet, the rows list names no
// database per row, pages with next_after, and has no cursor.
func TestOneDatabaseListUnchanged(t *testing.T) {
	e := newEnv(t, false)
	e.enqueue("run-1", "charge", "", 3)
	var raw struct {
		Rows []map[string]any `json:"rows"`
	}
	e.getJSON("/api/v1/rows?limit=2", http.StatusOK, &raw)
	_, body := e.get("/api/v1/rows?limit=2")
	if strings.Contains(body, `"next_cursor"`) || strings.Contains(body, `"databases_unread"`) || len(raw.Rows) != 2 {
		t.Errorf("GET /api/v1/rows with one database: %s, want no cursor nor unread databases", body)
	}
	for _, r := range raw.Rows {
		if _, ok := r["database"]; ok {
			t.Errorf("GET /api/v1/rows with one database: a row naming its database: %v", r)
		}
	}
	var page RowsPage
	e.getJSON("/api/v1/rows?limit=2", http.StatusOK, &page)
	if page.NextAfter == 0 || len(page.Rows) != 2 || page.Database != "default" || !slices.ContainsFunc(page.Rows, func(r RowView) bool { return r.Seq > 0 }) {
		t.Errorf("one database's rows: %+v", page)
	}
}

// TestFleetRunFound: with a fleet and no database named, a run (its API
// and its page) is read in the database holding it, not looked for in the
// first only; a run in two databases is a 409 naming both; in none a 404
// saying every database was searched; the first database down, the run is
// still found in its own, the unread one named.
func TestFleetRunFound(t *testing.T) {
	e, f := newFleetEnv(t, []string{"a", "b", "c"}, nil)
	storetest.Enqueue(t, f.pools["b"], "run-b", "charge", 2)
	var run struct {
		AgentRunID string   `json:"agent_run_id"`
		Database   string   `json:"database"`
		Unread     []string `json:"databases_unread"`
		Steps      []any    `json:"steps"`
	}
	e.getJSON("/api/v1/runs/run-b", http.StatusOK, &run)
	if run.AgentRunID != "run-b" || run.Database != "b" || len(run.Steps) != 2 {
		t.Errorf("GET /api/v1/runs/run-b without a database: %+v, want its 2 steps from b", run)
	}
	if code, body := e.get("/runs/run-b"); code != http.StatusOK || !strings.Contains(body, "run-b") || !strings.Contains(body, "?database=b") {
		t.Errorf("/runs/run-b without a database: %d, want b's run, its links naming b:\n%s", code, body)
	}
	storetest.Enqueue(t, f.pools["c"], "run-b", "note", 1)
	if code, body := e.get("/api/v1/runs/run-b"); code != http.StatusConflict || !strings.Contains(body, `"databases":["b","c"]`) {
		t.Errorf("GET /api/v1/runs/run-b, in b and c: %d %s, want 409 naming both", code, body)
	}
	if code, body := e.get("/api/v1/runs/run-nope"); code != http.StatusNotFound || !strings.Contains(body, "any of the 3 databases") {
		t.Errorf("GET an unknown run: %d %s, want 404 naming every database searched", code, body)
	}
	storetest.Enqueue(t, f.pools["b"], "run-b2", "charge", 1)
	f.setDown("a", true)
	e.getJSON("/api/v1/runs/run-b2", http.StatusOK, &run)
	if run.Database != "b" || len(run.Unread) != 1 || !strings.HasPrefix(run.Unread[0], "a: ") {
		t.Errorf("GET /api/v1/runs/run-b2 with a down: %+v, want it from b, a named unread", run)
	}
	if code, body := e.get("/api/v1/runs/run-nope"); code != http.StatusServiceUnavailable || !strings.Contains(body, "a (") {
		t.Errorf("GET an unknown run with a down: %d %s, want 503 naming a", code, body)
	}
}
