package console

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/compensations"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/drainer"
	"github.com/drainer-io/drainer/internal/fleet"
	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/drainer-io/drainer/tooling/pgtemp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// okAdapter answers every request with success.
type okAdapter struct{}

func (okAdapter) Dispatch(context.Context, *dispatch.Message) dispatch.Result {
	return dispatch.Result{Outcome: dispatch.Success, Status: 200}
}

// fleetCluster is a throwaway Postgres with the test's databases, each
// migrated (from a template).
type fleetCluster struct {
	c *pgtemp.Cluster
}

func newFleetCluster(t *testing.T, dbs []string) *fleetCluster {
	t.Helper()
	c, err := pgtemp.Start(t.Context(), pgtemp.Options{Settings: map[string]string{"max_connections": "100"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
	})
	cl := &fleetCluster{c: c}
	cl.exec(t, "postgres", "CREATE DATABASE con_tmpl")
	conn, err := pgx.Connect(t.Context(), c.URL("con_tmpl"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Migrate(t.Context(), conn, storetest.Schema, nil); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(context.Background())
	for _, n := range dbs {
		cl.exec(t, "postgres", "CREATE DATABASE "+pgx.Identifier{n}.Sanitize()+" TEMPLATE con_tmpl")
	}
	return cl
}

func (cl *fleetCluster) exec(t *testing.T, db, sql string) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), cl.c.URL(db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// query runs fn on a connection of its own to db.
func (cl *fleetCluster) query(t *testing.T, db string, fn func(*pgxpool.Pool)) {
	t.Helper()
	pc, err := pgxpool.ParseConfig(cl.c.URL(db))
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(t.Context(), pc)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	fn(pool)
}

// counts is db's rows by status, counted exactly.
func (cl *fleetCluster) counts(t *testing.T, db string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	cl.query(t, db, func(p *pgxpool.Pool) {
		rows, _ := p.Query(t.Context(), "SELECT status, count(*) FROM drainer.outbox GROUP BY status")
		var s string
		var n int64
		if _, err := pgx.ForEachRow(rows, []any{&s, &n}, func() error { out[s] = n; return nil }); err != nil {
			t.Fatal(err)
		}
	})
	return out
}

func nonZero[K ~string](m map[K]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range m {
		if v != 0 {
			out[string(k)] = v
		}
	}
	return out
}

// TestFleetConsole serves the console on one replica of a fleet of two
// draining four databases: the overview counts every database (those the
// other replica drains included) from the coordination database, one
// database's pages and actions reach that database only, links keep it,
// an unknown one is a 404 naming it, and an idle console holds no
// connection to any database, the coordination database included: its
// overview is what the replica's heartbeat reads back, and keeps changing.
func TestFleetConsole(t *testing.T) {
	dbs := []string{"con_a", "con_b", "con_c", "con_d"}
	cl := newFleetCluster(t, dbs)
	// Member ids that split the databases between the two replicas, so that
	// the console's replica shows some it does not drain.
	var ids [2]string
	for i := 0; ; i++ {
		ids = [2]string{fmt.Sprintf("con-one-%d", i), fmt.Sprintf("con-two-%d", i)}
		mine := 0
		for _, db := range dbs {
			if fleet.Owner(ids[:], db) == ids[0] {
				mine++
			}
		}
		if mine > 0 && mine < len(dbs) {
			break
		}
	}
	// Tool t is routed (its rows succeed); tool u's rows stay pending for
	// the actions.
	sent, held := map[string]int{}, map[string][]string{}
	for i, db := range dbs {
		cl.query(t, db, func(p *pgxpool.Pool) {
			sent[db] = 2 + i
			storetest.Enqueue(t, p, "run-t-"+db, "t", sent[db])
			held[db] = storetest.Enqueue(t, p, "run-u-"+db, "u", 3+i)
			// Not due for an hour: no engine looks at them meanwhile.
			if _, err := p.Exec(t.Context(), "UPDATE drainer.queue SET next_attempt_at = now() + interval '1 hour' WHERE tool_name = 'u'"); err != nil {
				t.Fatal(err)
			}
		})
	}
	reg, err := dispatch.NewRegistry(&dispatch.Entry{Name: "p", Type: "test", Adapter: okAdapter{}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	routing := func() *drainer.Routing {
		return &drainer.Routing{Registry: reg, UnroutedRecheck: 200 * time.Millisecond,
			Compensations: compensations.NewMap(map[string]string{"t": ""}),
			Routes: map[string]*drainer.Route{"t": {Tool: "t", Adapter: "p", Class: "key_idempotent", MaxAttempts: 5,
				Backoff: drainer.Backoff{Base: 10 * time.Millisecond, Cap: 50 * time.Millisecond, MaxRetryAfter: time.Second}}}}
	}
	src := func(context.Context) ([]fleet.Database, error) {
		out := make([]fleet.Database, len(dbs))
		for i, n := range dbs {
			out[i] = fleet.Database{Name: n, URL: cl.c.URL(n)}
		}
		return out, nil
	}
	const idle = time.Second
	var replicas []*fleet.Fleet
	for _, id := range ids {
		f, err := fleet.New(fleet.Config{MemberID: id, Source: src, CoordinationURL: cl.c.URL("con_a"), Lease: 3 * time.Second,
			Refresh: 300 * time.Millisecond, StopTimeout: 5 * time.Second, Routing: routing, Version: "test", PoolIdle: idle,
			Engine: drainer.Config{Workers: 4, Lease: 20 * time.Second, LeaseMargin: time.Second,
				PollInterval: 100 * time.Millisecond, ReclaimInterval: 200 * time.Millisecond, SnapshotInterval: 300 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- f.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("fleet %s: %v", id, err)
			}
		})
		replicas = append(replicas, f)
	}
	srv, err := New(Config{Addr: "127.0.0.1:0", Fleet: replicas[0], Store: store.MustNew(""), Actions: true, Token: testToken,
		SampleEvery: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	base := "http://" + srv.Addr()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	// The overview: every database, with its true counts once the routed
	// rows are drained and the owners have published.
	want := map[string]map[string]int64{}
	for _, db := range dbs {
		want[db] = map[string]int64{"succeeded": int64(sent[db]), "pending": int64(len(held[db]))}
	}
	var st Stats
	deadline := time.Now().Add(90 * time.Second)
	for {
		code, body := get("/api/v1/stats")
		st = Stats{}
		if code == http.StatusOK {
			_ = json.Unmarshal([]byte(body), &st)
		}
		got := map[string]map[string]int64{}
		for _, b := range st.RowsByDatabase {
			got[b.Name] = nonZero(b.RowsByStatus)
		}
		if maps.EqualFunc(got, want, maps.Equal) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rows by database: %v, want %v (last answer %d %s)", got, want, code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, db := range dbs {
		if got := nonZero(cl.counts(t, db)); !maps.Equal(got, want[db]) {
			t.Fatalf("%s holds %v, want %v", db, got, want[db])
		}
	}
	members := map[string]string{}
	for _, b := range st.RowsByDatabase {
		members[b.Name] = b.Member
		if b.State != "running" || !b.MemberAlive || b.SampledAt == nil {
			t.Errorf("%s: state %s, member alive %v, sampled at %v; want running, alive, sampled", b.Name, b.State, b.MemberAlive, b.SampledAt)
		}
	}
	var other string // a database the console's replica does not drain
	for _, db := range dbs {
		if members[db] == ids[1] {
			other = db
		}
		if members[db] != fleet.Owner(ids[:], db) {
			t.Errorf("%s published by %q, want its owner %s", db, members[db], fleet.Owner(ids[:], db))
		}
	}
	if other == "" {
		t.Fatalf("no database published by the other replica: %v", members)
	}
	var total int64
	for _, db := range dbs {
		total += want[db]["succeeded"]
	}
	if st.RowsByStatus["succeeded"] != total || st.Database != "" || !slices.Equal(st.Databases, dbs) {
		t.Errorf("fleet totals: %v, database %q, databases %v; want %d succeeded over %v", st.RowsByStatus, st.Database, st.Databases, total, dbs)
	}
	if code, body := get("/"); code != http.StatusOK || !strings.Contains(body, `aria-label="Rows by database"`) ||
		!strings.Contains(body, `href="/rows?database=`+other+`"`) {
		t.Errorf("overview page: %d, want the rows by database with a link to %s's rows", code, other)
	}

	// One database's details, through its own pool.
	var one Stats
	if code, body := get("/api/v1/stats?database=" + other); code != http.StatusOK || json.Unmarshal([]byte(body), &one) != nil ||
		one.Database != other || one.RowsByStatus["pending"] != int64(len(held[other])) || len(one.RowsByTool) != 1 || one.RowsByTool[0].Tool != "u" {
		t.Errorf("stats of %s: %d %s", other, code, body)
	}

	// Rows of one database only.
	var rows RowsPage
	if code, body := get("/api/v1/rows?limit=500&database=" + other); code != http.StatusOK || json.Unmarshal([]byte(body), &rows) != nil {
		t.Fatalf("rows of %s: %d %s", other, code, body)
	}
	if rows.Database != other || len(rows.Rows) != sent[other]+len(held[other]) {
		t.Errorf("rows of %s: %d rows of database %q, want %d", other, len(rows.Rows), rows.Database, sent[other]+len(held[other]))
	}
	for _, r := range rows.Rows {
		if !strings.HasSuffix(r.AgentRunID, "-"+other) {
			t.Errorf("rows of %s: a row of run %s", other, r.AgentRunID)
		}
	}

	// Pages keep the database in their links: rows list → row → run.
	key := held[other][0]
	q := "?database=" + url.QueryEscape(other)
	code, body := get("/rows" + q + "&tool=u")
	if code != http.StatusOK || !strings.Contains(body, `href="/rows/`+url.PathEscape(key)+q+`"`) ||
		!strings.Contains(body, `href="/runs/run-u-`+other+q+`"`) || !strings.Contains(body, `<option selected>`+other+`</option>`) {
		t.Errorf("rows page of %s: %d, want links to its rows and runs naming it:\n%s", other, code, body)
	}
	for _, nav := range []string{`href="/` + q + `"`, `href="/rows` + q + `"`, `href="/parked` + q + `"`, `href="/pauses` + q + `"`} {
		if !strings.Contains(body, nav) {
			t.Errorf("rows page of %s: no nav link %s", other, nav)
		}
	}
	code, body = get("/rows/" + url.PathEscape(key) + q)
	if code != http.StatusOK || !strings.Contains(body, key) || !strings.Contains(body, `href="/runs/run-u-`+other+q+`"`) {
		t.Errorf("row page of %s in %s: %d, want it with a link to its run naming the database", key, other, code)
	}
	code, body = get("/runs/run-u-" + other + q)
	if code != http.StatusOK || !strings.Contains(body, `href="/rows/`+url.PathEscape(key)+q+`"`) {
		t.Errorf("run page in %s: %d, want links to its rows naming the database", other, code)
	}
	// The key is in no other database: without the parameter (the first
	// database) or with another one, it is not found.
	for _, db := range dbs {
		if db == other {
			continue
		}
		if code, _ := get("/api/v1/rows/" + url.PathEscape(key) + "?database=" + db); code != http.StatusNotFound {
			t.Errorf("%s's key in %s: %d, want 404", other, db, code)
		}
	}

	// Actions act on the database named, in JSON and in a form.
	post := func(verb, ctype, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/actions/"+verb, strings.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("X-Drainer-Actor", "alice")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	js, _ := json.Marshal(map[string]string{"key": key, "database": other, "reason": "fleet test"})
	if code, body := post("cancel", "application/json", string(js)); code != http.StatusOK {
		t.Fatalf("cancel %s in %s: %d %s", key, other, code, body)
	}
	key2 := held[other][1]
	code, body = post("cancel", "application/x-www-form-urlencoded", url.Values{"key": {key2}, "database": {other}, "back": {"/rows" + q}}.Encode())
	if code != http.StatusOK || !strings.Contains(body, `href="/rows/`+url.PathEscape(key2)+q+`"`) {
		t.Errorf("form cancel of %s in %s: %d, want a result linking to the row in its database:\n%s", key2, other, code, body)
	}
	for _, db := range dbs {
		w := maps.Clone(want[db])
		if db == other {
			w["pending"] -= 2
			w["cancelled"] = 2
		}
		if got := nonZero(cl.counts(t, db)); !maps.Equal(got, w) {
			t.Errorf("%s after the cancels: %v, want %v", db, got, w)
		}
	}
	cl.query(t, other, func(p *pgxpool.Pool) {
		for _, k := range []string{key, key2} {
			var actor, to string
			if err := p.QueryRow(t.Context(), `SELECT actor, to_status FROM drainer.audit WHERE key = $1 ORDER BY id DESC LIMIT 1`, k).Scan(&actor, &to); err != nil {
				t.Fatal(err)
			}
			if actor != "console:alice" || to != "cancelled" {
				t.Errorf("audit of %s in %s: %s by %s, want cancelled by console:alice", k, other, to, actor)
			}
		}
	})

	// An unknown database: a 404 naming it, in the API, a page and an action.
	if code, body := get("/api/v1/rows?database=con_nope"); code != http.StatusNotFound || !strings.Contains(body, `unknown database \"con_nope\"`) {
		t.Errorf("unknown database: %d %s, want 404 naming it", code, body)
	}
	if code, body := get("/rows?database=con_nope"); code != http.StatusNotFound || !strings.Contains(body, "con_nope") {
		t.Errorf("unknown database page: %d, want 404 naming it", code)
	}
	if code, body := post("cancel", "application/json", `{"key":"k","database":"con_nope"}`); code != http.StatusNotFound || !strings.Contains(body, "con_nope") {
		t.Errorf("action on an unknown database: %d %s, want 404 naming it", code, body)
	}

	// Idle, the console holds no connection to any database: one
	// database's pages close theirs when idle, and the overview opens none
	// (not even to the coordination database, where only each replica's
	// heartbeat connection is); the fleet keeps its bound of two per
	// drained database and one coordination connection per replica.
	pc, err := pgx.Connect(t.Context(), cl.c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close(context.Background())
	conns := func() (console map[string]int, by map[string]int) {
		console, by = map[string]int{}, map[string]int{}
		rows, _ := pc.Query(t.Context(), `SELECT datname, application_name FROM pg_stat_activity WHERE datname LIKE 'con\_%'`)
		var db, app string
		if _, err := pgx.ForEachRow(rows, []any{&db, &app}, func() error {
			by[db]++
			if app != "drainer" { // the engines' and the heartbeats'
				console[db+" "+app]++
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return console, by
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		console, by := conns()
		if len(console) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("console connections still open %v after the idle timeout: %v (all: %v)", idle, console, by)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The overview keeps sampling meanwhile, and what it shows keeps
	// changing (each read by a later heartbeat, the cancels' counts
	// among them), with no console connection anywhere.
	var reads []time.Time
	wantOther := map[string]int64{"succeeded": want[other]["succeeded"], "pending": want[other]["pending"] - 2, "cancelled": 2}
	deadline = time.Now().Add(90 * time.Second)
	for shown := false; len(reads) < 3 || !shown; {
		code, body := get("/api/v1/stats")
		var st Stats
		if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil || st.RowsByDatabaseReadAt == nil {
			t.Fatalf("stats: %d %s", code, body)
		}
		if len(reads) == 0 || st.RowsByDatabaseReadAt.After(reads[len(reads)-1]) {
			reads = append(reads, *st.RowsByDatabaseReadAt)
		}
		for _, b := range st.RowsByDatabase {
			if b.Name == other && maps.Equal(nonZero(b.RowsByStatus), wantOther) {
				shown = true
			}
		}
		console, by := conns()
		if len(console) != 0 {
			t.Fatalf("the fleet's overview opened connections %v (all: %v), want none: the heartbeat reads it", console, by)
		}
		for _, db := range dbs {
			bound := 2
			if db == "con_a" {
				bound += len(replicas) // the coordination database: each replica's heartbeat
			}
			if by[db] > bound {
				t.Errorf("%s: %d server connections, want at most %d", db, by[db], bound)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the overview read at %v, showing %s's cancels: %v; want three reads and the cancels", reads, other, shown)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if code, body := get("/"); code != http.StatusOK || !regexp.MustCompile(`data-stat="rows_by_database_read_at">\d{4}-\d\d-\d\d `).MatchString(body) {
		t.Errorf("overview page: %d, want the time the rows by database were read", code)
	}
}
