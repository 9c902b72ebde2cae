package console

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/drainer"
	"github.com/drainer-io/drainer/internal/fleet"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// poolFleet is a fleet over test databases, each a pool of its own,
// published as drained by replica-<name>; a database in down cannot be
// reached.
type poolFleet struct {
	names []string
	pools map[string]*pgxpool.Pool

	mu   sync.Mutex
	down map[string]bool
}

func (f *poolFleet) setDown(name string, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down[name] = down
}

func (f *poolFleet) Databases() []string { return f.names }

func (f *poolFleet) Backlogs() ([]fleet.Backlog, time.Time, error) {
	out := make([]fleet.Backlog, 0, len(f.names))
	for _, n := range f.names {
		out = append(out, fleet.Backlog{Name: n, Member: "replica-" + n, MemberAlive: true, State: "running", RowsByStatus: map[string]int64{}})
	}
	return out, time.Now(), nil
}

func (f *poolFleet) Pool(name string) (*pgxpool.Pool, error) {
	f.mu.Lock()
	down := f.down[name]
	f.mu.Unlock()
	if down {
		return nil, errors.New("dial tcp: connection refused")
	}
	p, ok := f.pools[name]
	if !ok {
		return nil, &fleet.UnknownDatabaseError{Name: name}
	}
	return p, nil
}

// newFleetEnv serves a console (actions on) over a poolFleet of names,
// configured further by cfg; env.pool is the first database's.
func newFleetEnv(t *testing.T, names []string, cfg func(*Config)) (*env, *poolFleet) {
	t.Helper()
	f := &poolFleet{names: names, pools: map[string]*pgxpool.Pool{}, down: map[string]bool{}}
	for _, n := range names {
		f.pools[n] = storetest.NewPool(t)
	}
	c := Config{Addr: "127.0.0.1:0", Fleet: f, Store: store.MustNew(""), Actions: true, Token: testToken}
	if cfg != nil {
		cfg(&c)
	}
	srv, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	srv.stats.sample(t.Context())
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &env{t: t, pool: f.pools[names[0]], srv: srv, http: hs}, f
}

// TestFleetDatabaseShowsItsOwnEngine: with a fleet, one database's
// overview shows the breakers and holds of its engine on this replica and
// the dispatch rates of that database only (not the replica's total); a
// database this replica does not drain shows none of another's and says
// who drains it.
func TestFleetDatabaseShowsItsOwnEngine(t *testing.T) {
	reg := prometheus.NewRegistry()
	dispatched := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "drainer_dispatch_total"}, []string{"database", "adapter", "outcome"})
	reg.MustRegister(dispatched)
	since := time.Now().Add(-time.Minute)
	engines := map[string][]drainer.AdapterState{
		"a": {{Adapter: "payments", Reason: "circuit breaker open", Holds: []drainer.Hold{{Route: "charge", Since: since}}}},
		"c": {{Adapter: "payments", Ready: true}},
	}
	e, _ := newFleetEnv(t, []string{"a", "b", "c"}, func(c *Config) {
		c.Gatherer = reg
		c.EngineAdapters = func() map[string][]drainer.AdapterState { return engines }
	})
	// Database a sends 10 requests, c 1,000 and has 5 breaker_open,
	// between two samples.
	dispatched.WithLabelValues("a", "payments", "success")
	dispatched.WithLabelValues("c", "payments", "success")
	e.srv.stats.sample(t.Context())
	time.Sleep(100 * time.Millisecond)
	dispatched.WithLabelValues("a", "payments", "success").Add(10)
	dispatched.WithLabelValues("c", "payments", "success").Add(1000)
	dispatched.WithLabelValues("c", "payments", "breaker_open").Add(5)
	e.srv.stats.sample(t.Context())

	var a, b, all Stats
	e.getJSON("/api/v1/stats?database=a", http.StatusOK, &a)
	e.getJSON("/api/v1/stats?database=b", http.StatusOK, &b)
	e.getJSON("/api/v1/stats", http.StatusOK, &all)
	ratio := a.DispatchRates["success"] / all.DispatchRates["success"]
	if ratio < 0.009 || ratio > 0.011 || a.DispatchRates["breaker_open"] != 0 || a.RequestsPerSecond != a.DispatchRates["success"] {
		t.Errorf("rates of a: %v (%.1f requests/s), of the replica %v: want a's 10 successes only", a.DispatchRates, a.RequestsPerSecond, all.DispatchRates)
	}
	if len(a.Adapters) != 1 || a.Adapters[0].Database != "a" || a.Adapters[0].Ready || a.Adapters[0].Reason != "circuit breaker open" ||
		len(a.Adapters[0].Holds) != 1 || a.Adapters[0].Holds[0].Route != "charge" || a.DrainedHere == nil || !*a.DrainedHere {
		t.Errorf("a: adapters %+v, drained here %v; want payments of a open, held on charge, drained here", a.Adapters, a.DrainedHere)
	}
	if len(b.Adapters) != 0 || len(b.DispatchRates) != 0 || b.DrainedHere == nil || *b.DrainedHere || b.DrainedBy != "replica-b" {
		t.Errorf("b: adapters %+v, rates %v, drained here %v by %q; want none, not drained here, by replica-b",
			b.Adapters, b.DispatchRates, b.DrainedHere, b.DrainedBy)
	}
	// The whole fleet's overview: every engine of this replica, each
	// naming its database.
	if len(all.Adapters) != 2 || all.Adapters[0].Database != "a" || all.Adapters[1].Database != "c" {
		t.Errorf("the fleet's adapters: %+v, want a's and c's", all.Adapters)
	}
	if _, body := e.get("/pauses?database=a"); !strings.Contains(body, "circuit breaker open") || strings.Contains(body, "No adapter known") {
		t.Errorf("pauses page of a: want its breaker open:\n%s", body)
	}
	if _, body := e.get("/pauses?database=b"); !strings.Contains(body, "This replica does not drain b") || !strings.Contains(body, "replica-b") {
		t.Errorf("pauses page of b: want it to say this replica does not drain b, replica-b does:\n%s", body)
	}
	if _, body := e.get("/?database=b"); !strings.Contains(body, "This replica does not drain b") || !strings.Contains(body, `data-stat="rate">—`) {
		t.Errorf("overview of b: want no rate and that this replica does not drain it:\n%s", body)
	}
}

// TestFleetOverviewPauses: without a database, the fleet's pauses page and
// API list every database's pauses, each naming its database (never the
// first database's alone, never "Nothing paused" while one is paused); a
// database whose pauses cannot be read is named, never taken for one
// without. The whole fleet's overview, which costs no connection, sends
// to them rather than saying nothing is paused.
func TestFleetOverviewPauses(t *testing.T) {
	e, f := newFleetEnv(t, []string{"a", "b"}, nil)
	if code, body := e.post("/api/v1/actions/pause", map[string]any{"target": "route", "name": "charge", "database": "b", "reason": "INC-1"}, bearer); code != http.StatusOK {
		t.Fatalf("pause in b: %d %v", code, body)
	}
	var list []struct{ Database, Name string }
	e.getJSON("/api/v1/pauses", http.StatusOK, &list)
	if len(list) != 1 || list[0].Database != "b" {
		t.Errorf("the fleet's pauses: %+v, want b's", list)
	}
	if _, body := e.get("/"); strings.Contains(body, "Nothing paused") || !strings.Contains(body, "data-pauses-elsewhere") {
		t.Errorf("the fleet's overview: want a link to every database's pauses, never nothing paused:\n%s", body)
	}
	if _, body := e.get("/pauses"); !strings.Contains(body, `<a href="/pauses?database=b">b</a></td><td>route</td><td>charge</td>`) {
		t.Errorf("the fleet's pauses page: want b's pause, naming b:\n%s", body)
	}
	e.getJSON("/api/v1/pauses?database=a", http.StatusOK, &list)
	if len(list) != 0 {
		t.Errorf("pauses of a: %+v, want none", list)
	}

	// Resumed by this console: the pauses say so at once.
	if code, body := e.post("/api/v1/actions/resume", map[string]any{"target": "route", "name": "charge", "database": "b"}, bearer); code != http.StatusOK {
		t.Fatalf("resume in b: %d %v", code, body)
	}
	e.getJSON("/api/v1/pauses", http.StatusOK, &list)
	if len(list) != 0 {
		t.Errorf("the fleet's pauses after the resume: %+v, want none", list)
	}
	// A database that cannot be read is named, not taken for unpaused.
	f.setDown("b", true)
	e.srv.pauses.forget()
	if code, body := e.get("/api/v1/pauses"); code != http.StatusServiceUnavailable || !strings.Contains(body, "the pauses of b") {
		t.Errorf("the fleet's pauses with b down: %d %s, want 503 naming b", code, body)
	}
	if _, body := e.get("/pauses"); strings.Contains(body, "Nothing paused") || !strings.Contains(body, "pauses unknown: b") && !strings.Contains(body, "b: ") {
		t.Errorf("the fleet's pauses page with b down: want b's pauses unknown:\n%s", body)
	}
}

// TestFleetActionFindsTheKey: an action on a key naming no database acts
// in the database holding it; a key in two databases, in none, or an
// action on no key, is refused naming the databases rather than tried in
// the first.
func TestFleetActionFindsTheKey(t *testing.T) {
	e, f := newFleetEnv(t, []string{"a", "b", "c"}, nil)
	keys := storetest.Enqueue(t, f.pools["b"], "run-1", "charge", 2)
	code, body := e.post("/api/v1/actions/cancel", map[string]any{"key": keys[0], "reason": "found in b"}, bearer)
	if code != http.StatusOK || body["database"] != "b" {
		t.Fatalf("cancel %s without a database: %d %v, want it cancelled in b", keys[0], code, body)
	}
	if s := storetest.Get(t, f.pools["b"], keys[0]).Status; s != "cancelled" {
		t.Errorf("%s in b: %s, want cancelled", keys[0], s)
	}
	// The same tuple in c: the same key in two databases.
	if again := storetest.Enqueue(t, f.pools["c"], "run-1", "charge", 2); again[1] != keys[1] {
		t.Fatalf("keys %v in c, want %v", again, keys)
	}
	code, body = e.post("/api/v1/actions/resolve", map[string]any{"key": keys[1], "note": "n"}, bearer)
	if msg, _ := body["error"].(string); code != http.StatusConflict || !strings.Contains(msg, "b, c") {
		t.Errorf("resolve of a key in b and c: %d %v, want 409 naming both", code, body)
	}
	code, body = e.post("/api/v1/actions/requeue", map[string]any{"key": "idem_v1_nope"}, bearer)
	if msg, _ := body["error"].(string); code != http.StatusNotFound || !strings.Contains(msg, "any of the 3 databases") {
		t.Errorf("requeue of an unknown key: %d %v, want 404 naming the databases looked in", code, body)
	}
	code, body = e.post("/api/v1/actions/pause", map[string]any{"target": "route", "name": "charge"}, bearer)
	if msg, _ := body["error"].(string); code != http.StatusBadRequest || !strings.Contains(msg, "a, b, c") {
		t.Errorf("pause without a database: %d %v, want 400 naming the databases", code, body)
	}
	// A database that cannot be read may hold the key too: nothing is done.
	f.setDown("a", true)
	k3 := storetest.Enqueue(t, f.pools["b"], "run-2", "charge", 1)[0]
	code, body = e.post("/api/v1/actions/cancel", map[string]any{"key": k3}, bearer)
	if msg, _ := body["error"].(string); code != http.StatusServiceUnavailable || !strings.Contains(msg, "found in b") || !strings.Contains(msg, "a (") {
		t.Errorf("cancel of b's key with a down: %d %v, want 503 naming a", code, body)
	}
	if s := storetest.Get(t, f.pools["b"], k3).Status; s != "pending" {
		t.Errorf("%s in b after the refusal: %s, want pending", k3, s)
	}
}

// TestPauseUnknownName: a pause naming a route or adapter the loaded
// config does not know is refused, naming it and the closest known name
// (or the other target that has it); resume takes any paused name.
func TestPauseUnknownName(t *testing.T) {
	pool := storetest.NewPool(t)
	srv, err := New(Config{Addr: "127.0.0.1:0", Actions: true, Token: testToken,
		Databases: []Database{{Name: "default", DB: pool, Store: store.MustNew("")}},
		Names:     func() ([]string, []string) { return []string{"charge_card", "refund"}, []string{"payments", "mail"} }})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	e := &env{t: t, pool: pool, srv: srv, http: hs}
	for _, c := range []struct{ target, name, want string }{
		{"adapter", "paymnts", `no adapter "paymnts" (did you mean "payments"?); its adapters: payments, mail`},
		{"route", "chrage_card", `no route "chrage_card" (did you mean "charge_card"?)`},
		{"route", "payments", `no route "payments": it names the adapter "payments" (target "adapter")`},
		{"route", "zzz", `no route "zzz"; its routes: charge_card, refund`},
	} {
		code, body := e.post("/api/v1/actions/pause", map[string]any{"target": c.target, "name": c.name}, bearer)
		if msg, _ := body["error"].(string); code != http.StatusBadRequest || !strings.Contains(msg, c.want) {
			t.Errorf("pause %s %s: %d %v, want 400 with %s", c.target, c.name, code, body, c.want)
		}
	}
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM drainer.pauses").Scan(&n); err != nil || n != 0 {
		t.Fatalf("pauses after the refusals: %d (%v), want none", n, err)
	}
	if code, body := e.post("/api/v1/actions/pause", map[string]any{"target": "adapter", "name": "payments"}, bearer); code != http.StatusOK {
		t.Errorf("pause adapter payments: %d %v, want 200 (its answer, after the 303)", code, body)
	}
	// A pause of a route the config no longer names is lifted still.
	e.exec(`INSERT INTO drainer.pauses (target, name, paused_by, reason) VALUES ('route', 'gone', 'x', '')`)
	if code, body := e.post("/api/v1/actions/resume", map[string]any{"target": "route", "name": "gone"}, bearer); code != http.StatusOK {
		t.Errorf("resume route gone: %d %v, want 200 (its answer, after the 303)", code, body)
	}
	var list []Pause
	e.getJSON("/api/v1/pauses", http.StatusOK, &list)
	if !slices.EqualFunc(list, []Pause{{Database: "default", Pause: store.Pause{Target: "adapter", Name: "payments"}}},
		func(a, b Pause) bool { return a.Database == b.Database && a.Target == b.Target && a.Name == b.Name }) {
		t.Errorf("pauses: %+v, want adapter payments of default", list)
	}
}
