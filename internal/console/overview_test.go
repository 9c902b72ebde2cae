package console

import (
	"context"
	"html"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/store"
)

// lastErrorCell finds the last_error cell of key's line in a rows or
// parked page: its class and its text.
func lastErrorCell(t *testing.T, body, key string) (class, text string) {
	t.Helper()
	i := strings.Index(body, ">"+key+"</a>")
	if i < 0 {
		t.Fatalf("no line for %s", key)
	}
	tr := body[i:]
	tr = tr[:strings.Index(tr, "</tr>")]
	m := regexp.MustCompile(`<td class="([a-z]+)" title="[^"]*">([^<]*)</td>\s*$`).FindStringSubmatch(tr)
	if m == nil {
		t.Fatalf("no last_error cell on the line of %s: %s", key, tr)
	}
	return m[1], html.UnescapeString(m[2])
}

// TestBackpressureIsInformation: a row handed back because its adapter is
// at its concurrency cap (max_concurrency, or the implicit share of the
// workers) or at its rate_limit is shown as information, in words that say
// the rows wait their turn; a breaker open, an auth hold and an unreachable
// provider stay errors.
func TestBackpressureIsInformation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	keys := e.enqueue("run-bp", "charge_card", "invoice-1", 5)
	for i, msg := range []string{
		`adapter "payments" is at max_concurrency; no attempt consumed`,
		`adapter "payments" is at its rate_limit; no attempt consumed`,
		`adapter "payments" circuit breaker is open (the provider looks down); no attempt consumed`,
		`adapter "payments" is held back for this route: the provider refused the credentials (auth hold); no attempt consumed`,
		`Post "http://payments.internal/v1/charge_card": dial tcp 10.0.0.7:80: connect: connection refused`,
	} {
		e.exec(`UPDATE drainer.outbox SET last_error = $2 WHERE key = $1`, keys[i], msg)
	}
	code, body := e.get("/rows?run=run-bp")
	if code != http.StatusOK {
		t.Fatalf("rows page: %d", code)
	}
	for i, want := range []struct{ class, text string }{
		{"info", `adapter "payments" at its concurrency cap: rows wait their turn`},
		{"info", `adapter "payments" at its rate_limit: rows wait their turn`},
		{"err", "circuit breaker is open"},
		{"err", "auth hold"},
		{"err", "connection refused"},
	} {
		class, text := lastErrorCell(t, body, keys[i])
		if class != want.class || !strings.Contains(text, want.text) {
			t.Errorf("row %d: class %q, text %q; want class %q and %q", i, class, text, want.class, want.text)
		}
	}
	// The row page says the same.
	_, body = e.get("/rows/" + keys[0])
	if !strings.Contains(body, `<p class="info">adapter &#34;payments&#34; at its concurrency cap: rows wait their turn`) ||
		strings.Contains(body, `<pre class="err">`) {
		t.Errorf("row page of a row at the concurrency cap: no information, or an error")
	}
	_, body = e.get("/rows/" + keys[2])
	if !strings.Contains(body, `<pre class="err">adapter &#34;payments&#34; circuit breaker is open`) {
		t.Errorf("row page of a row refused by an open breaker: no error")
	}
}

// TestOverviewFlagsUnroutedTools: the overview's work by tool flags a tool
// whose pending rows no route takes, with a link to those rows; a routed
// tool has no flag. Without an engine beside it, the console reads the
// unrouted tools from the daemons' backlog snapshot.
func TestOverviewFlagsUnroutedTools(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	e.enqueue("run-u1", "charge_card", "invoice-1", 2)
	e.enqueue("run-u2", "mystery_tool", "user-1", 3)
	if _, err := store.MustNew("").RefreshSnapshot(context.Background(), e.pool, 0, []string{"charge_card"}); err != nil {
		t.Fatal(err)
	}
	e.srv.stats.sample(context.Background())
	checkUnroutedFlag(t, e, "mystery_tool", "charge_card", 3)
}

// TestOverviewUnroutedByTheRoutingInForce: beside an engine, the routing in
// force says which tools have no route (fresher than the snapshot).
func TestOverviewUnroutedByTheRoutingInForce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	e.enqueue("run-r1", "charge_card", "invoice-1", 2)
	e.enqueue("run-r2", "send_fax", "user-1", 1)
	e.srv.cfg.Routed = func() []string { return []string{"charge_card", "refund_card"} }
	e.srv.stats.sample(context.Background())
	checkUnroutedFlag(t, e, "send_fax", "charge_card", 1)
}

func checkUnroutedFlag(t *testing.T, e *env, unrouted, routed string, rows int) {
	t.Helper()
	var st Stats
	e.getJSON("/api/v1/stats", http.StatusOK, &st)
	if len(st.UnroutedTools) != 1 || st.UnroutedTools[0] != unrouted {
		t.Errorf("unrouted_tools: %v, want [%s]", st.UnroutedTools, unrouted)
	}
	_, body := e.get("/")
	link := `data-no-route="` + unrouted + `" href="/rows?status=pending&amp;tool=` + unrouted + `"`
	if !strings.Contains(body, link) || !strings.Contains(body, ">no route</a>") {
		t.Errorf("overview: no flag linking to the unrouted rows (%s)", link)
	}
	if strings.Contains(body, `data-no-route="`+routed+`"`) {
		t.Errorf("overview: the routed tool %s is flagged", routed)
	}
	_, body = e.get("/rows?status=pending&tool=" + unrouted)
	if n := strings.Count(body, `class="key"><a href="/rows/`); n != rows {
		t.Errorf("the flag's rows list: %d rows, want %d", n, rows)
	}
}

// TestBacklogChartAxes: the backlog chart has a rows axis and a time axis,
// each titled and with tick labels; the overview draws it once there are
// two samples.
func TestBacklogChartAxes(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var h []Sample
	for i, v := range []int64{0, 3, 7, 5, 1} {
		h = append(h, Sample{At: t0.Add(time.Duration(i) * time.Minute), Pending: v, Parked: v / 3})
	}
	svg := string(chart(h))
	for _, want := range []string{
		`<g class="axis axis-x">`, `<g class="axis axis-y">`,
		`>rows</text>`, `>time (UTC)</text>`,
		// Time ticks from the first sample to the last.
		`>12:00:00</text>`, `>12:01:00</text>`, `>12:02:00</text>`, `>12:03:00</text>`, `>12:04:00</text>`,
		// Rows ticks up to a round top above the largest value (7).
		`text-anchor="end">0</text>`, `text-anchor="end">2</text>`, `text-anchor="end">4</text>`,
		`text-anchor="end">6</text>`, `text-anchor="end">8</text>`,
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %s", want)
		}
	}
	if n := strings.Count(svg, "<polyline"); n != 2 {
		t.Errorf("%d lines, want 2 (backlog and parked)", n)
	}
	for _, c := range []struct{ top, step, axisTop int64 }{{0, 1, 1}, {1, 1, 1}, {4, 1, 4}, {7, 2, 8}, {13, 5, 15}, {100, 50, 100}, {1234, 500, 1500}} {
		if step, top := yScale(c.top); step != c.step || top != c.axisTop {
			t.Errorf("yScale(%d) = %d, %d; want %d, %d", c.top, step, top, c.step, c.axisTop)
		}
	}

	e := newEnv(t, false)
	e.enqueue("run-ch", "charge_card", "", 2)
	e.srv.stats.sample(context.Background())
	e.srv.stats.sample(context.Background())
	_, body := e.get("/")
	if !strings.Contains(body, `<g class="axis axis-x">`) || !strings.Contains(body, `>time (UTC)</text>`) || !strings.Contains(body, `>rows</text>`) {
		t.Errorf("the overview's chart has no axes")
	}
}

// TestFailedSampleIsRepeatedSoon: a measurement that took long is repeated
// ten times its time later (a tenth of the database's time at most); one
// that failed is repeated after the usual interval, whatever its time (it
// may have waited for a lock until its timeout): after a 10 s timeout the
// overview stayed stale for 100 s.
func TestFailedSampleIsRepeatedSoon(t *testing.T) {
	every := 3 * time.Second
	for _, c := range []struct {
		took time.Duration
		ok   bool
		want time.Duration
	}{
		{100 * time.Millisecond, true, every},
		{2 * time.Second, true, 20 * time.Second},
		{10 * time.Second, false, every},
		{100 * time.Millisecond, false, every},
	} {
		if got := nextSample(every, c.took, c.ok); got != c.want {
			t.Errorf("after a measurement of %s (ok %v): next in %s, want %s", c.took, c.ok, got, c.want)
		}
	}
}
