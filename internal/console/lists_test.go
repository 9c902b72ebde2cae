package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
)

// noisyJSON is a JSON object of about size bytes that does not compress.
func noisyJSON(seed, size int) json.RawMessage {
	var b strings.Builder
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, "%08x", uint32(seed*2654435761+i*40503))
	}
	return json.RawMessage(fmt.Sprintf(`{"i":%d,"blob":"%s"}`, seed, b.String()))
}

// tracedEnv is a console over a second pool on e's database that records
// every statement the console runs.
func tracedEnv(t *testing.T) (*env, *storetest.Recorder) {
	t.Helper()
	pool := storetest.NewPool(t)
	rec := &storetest.Recorder{}
	traced := storetest.TracedPool(t, pool, rec)
	srv, err := New(Config{Addr: "127.0.0.1:0", Databases: []Database{{Name: "default", DB: traced, Store: store.MustNew("")}}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &env{t: t, pool: pool, srv: srv, http: hs}, rec
}

// TestListsReadNoPayload: the rows list (API and page), the search and the
// parked page read no payload and no response from the database, however
// large they are (a page holds up to 500 rows); the row's own page and
// answer still show them.
func TestListsReadNoPayload(t *testing.T) {
	t.Parallel()
	e, rec := tracedEnv(t)
	const size = 200 << 10
	var keys []string
	for i := range 6 {
		r := storetest.Row{AgentRunID: "run-big", StepID: fmt.Sprint("s", i), ToolName: "big_tool", Payload: noisyJSON(i, size)}
		if i%2 == 1 {
			r.Status, r.Response = outbox.StatusOutcomeUnknown, noisyJSON(100+i, size)
		}
		keys = append(keys, storetest.Insert(t, e.pool, r))
	}
	small := storetest.Row{AgentRunID: "run-small", ToolName: "big_tool", Status: outbox.StatusOutcomeUnknown,
		Payload: noisyJSON(7, 32<<10), Response: noisyJSON(8, 32<<10)}
	smallKey := storetest.Insert(t, e.pool, small)
	rec.Take()

	for _, p := range []string{"/api/v1/rows?limit=500", "/api/v1/rows?search=run-big&limit=500", "/rows?limit=500",
		"/rows?status=outcome_unknown&payload=" + url.QueryEscape(`{"i":3}`), "/parked"} {
		if code, body := e.get(p); code != http.StatusOK {
			t.Fatalf("GET %s: %d %.300s", p, code, body)
		}
		if n := storetest.ReturnedBytes(t, e.pool, rec.Take()); n > 32<<10 {
			t.Errorf("GET %s: its statements returned %d bytes for %d rows: they read payloads or responses", p, n, len(keys)+1)
		}
	}
	var page struct {
		Rows []map[string]any `json:"rows"`
	}
	e.getJSON("/api/v1/rows?limit=500", http.StatusOK, &page)
	if len(page.Rows) != len(keys)+1 {
		t.Fatalf("%d rows, want %d", len(page.Rows), len(keys)+1)
	}
	for i, r := range page.Rows[:len(keys)] {
		_, hasPayload := r["payload"]
		_, hasResponse := r["response"]
		stored, _ := r["payload_stored_bytes"].(float64)
		if hasPayload || hasResponse || r["key"] != keys[i] || stored < size || (r["response_stored_bytes"] == nil) == (i%2 == 1) {
			t.Errorf("row %d of the list: key %v, payload %v, response %v, payload_stored_bytes %v, response_stored_bytes %v",
				i, r["key"], hasPayload, hasResponse, r["payload_stored_bytes"], r["response_stored_bytes"])
		}
	}

	// The row's answer: a large payload as its size and a preview, a
	// smaller one and its response whole.
	var big, whole RowDetail
	e.getJSON("/api/v1/rows/"+keys[1], http.StatusOK, &big)
	if !big.PayloadTruncated || big.PayloadBytes < size || len(big.PayloadPreview) != maxPayloadView ||
		!big.ResponseTruncated || len(big.ResponsePreview) != maxPayloadView {
		t.Errorf("large row: payload_bytes %d, truncated %v (preview %d), response truncated %v (preview %d)",
			big.PayloadBytes, big.PayloadTruncated, len(big.PayloadPreview), big.ResponseTruncated, len(big.ResponsePreview))
	}
	e.getJSON("/api/v1/rows/"+smallKey, http.StatusOK, &whole)
	if whole.Row == nil || !sameJSON(whole.Row.Payload, small.Payload) || !sameJSON(whole.Row.Response, small.Response) {
		t.Errorf("row %s: its payload and response are not shown whole", smallKey)
	}
	if _, body := e.get("/rows/" + smallKey); !strings.Contains(body, string(small.Payload[len(small.Payload)-100:len(small.Payload)-2])) {
		t.Errorf("the row page does not show the payload")
	}
}

func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// TestOverviewBoundsTheWorkByTool: with more tools holding work than the
// overview shows, its work by tool names the maxToolsShown with the most
// rows, each unrouted one flagged once, and says how many more tools hold
// how many rows; the backlog still counts every row.
func TestOverviewBoundsTheWorkByTool(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	const extra = 25
	many := maxToolsShown + extra
	var ins []store.Intent
	for i := range many {
		ins = append(ins, store.Intent{AgentRunID: "run-tools", StepID: fmt.Sprint("s", i), ToolName: fmt.Sprintf("tool-%03d", i), Payload: []byte(`{}`)})
	}
	storetest.EnqueueIntents(t, e.pool, ins)
	e.enqueue("run-cc", "charge_card", "", 3)
	e.srv.cfg.Routed = func() []string { return []string{"charge_card"} }
	e.srv.stats.sample(context.Background())

	var st Stats
	e.getJSON("/api/v1/stats", http.StatusOK, &st)
	shown := toolsOf(st)
	if len(shown) != maxToolsShown || shown[0] != "charge_card" {
		t.Errorf("work by tool names %d tools (first %v), want %d with charge_card first", len(shown), shown[:min(1, len(shown))], maxToolsShown)
	}
	if want := int64(many + 1 - maxToolsShown); st.OtherTools != want || st.OtherToolRows[string(outbox.StatusPending)] != want || st.OtherRows() != want {
		t.Errorf("other_tools %d, other_tool_rows %v; want %d tools of one pending row", st.OtherTools, st.OtherToolRows, want)
	}
	if got := st.RowsByStatus[string(outbox.StatusPending)]; got != int64(many+3) {
		t.Errorf("pending %d, want %d", got, many+3)
	}
	seen := map[string]bool{}
	for _, u := range st.UnroutedTools {
		if seen[u] || u == "charge_card" {
			t.Errorf("unrouted_tools lists %s twice or routed", u)
		}
		seen[u] = true
	}
	if len(st.UnroutedTools) != maxToolsShown-1 {
		t.Errorf("%d unrouted tools, want %d (those shown)", len(st.UnroutedTools), maxToolsShown-1)
	}

	_, body := e.get("/")
	more := fmt.Sprintf(`<tr data-other-tools="%d"><td colspan="2" class="muted">and %d more tools</td><td class="n">%d</td></tr>`,
		st.OtherTools, st.OtherTools, st.OtherTools)
	if !strings.Contains(body, more) || strings.Count(body, `data-no-route="`) != maxToolsShown-1 {
		t.Errorf("overview: no %q, or %d no-route flags (want %d)", more, strings.Count(body, `data-no-route="`), maxToolsShown-1)
	}
	if _, body := e.get("/rows"); strings.Count(body, `<option value="tool-`) != maxToolsShown-1 {
		t.Errorf("the rows page's tool list holds %d tools, want %d", strings.Count(body, `<option value="tool-`), maxToolsShown-1)
	}
}

// TestParkedPageSaysWhenMoreAreParked: the Parked page of one database
// shows at most maxParkedShown rows of each parked status; past that it
// says more are parked and links to the lists that page through them all,
// and it says nothing of the kind when every parked row is shown.
func TestParkedPageSaysWhenMoreAreParked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	e.enqueue("run-p", "charge", "", maxParkedShown+1)
	e.exec(`UPDATE drainer.queue SET status = 'outcome_unknown'`)
	_, body := e.get("/parked")
	if !strings.Contains(body, "data-parked-more") || !strings.Contains(body, `href="/rows?status=outcome_unknown"`) {
		t.Fatalf("parked page with %d rows parked shows no note that more are parked:\n%s", maxParkedShown+1, body)
	}
	e.exec(`UPDATE drainer.queue SET status = 'pending' WHERE seq = (SELECT max(seq) FROM drainer.queue)`)
	if _, body := e.get("/parked"); strings.Contains(body, "data-parked-more") {
		t.Fatalf("parked page with %d rows parked says more are parked", maxParkedShown)
	}
}
