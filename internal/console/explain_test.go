package console

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// bigRows is the size of the outbox of TestListQueriesUseIndexes.
const bigRows = 1_000_000

// recorder keeps the statements a pool runs, with their arguments.
type recorder struct {
	mu    sync.Mutex
	stmts []recorded
}

type recorded struct {
	sql  string
	args []any
}

func (r *recorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	r.stmts = append(r.stmts, recorded{sql: d.SQL, args: d.Args})
	r.mu.Unlock()
	return ctx
}

func (r *recorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *recorder) take() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.stmts
	r.stmts = nil
	return out
}

// TestListQueriesUseIndexes fills the outbox with 10^6 rows, then runs
// every list query of the console (each filter, the search box, a deep
// keyset page) and proves with EXPLAIN that each statement reading the
// outbox uses an index and no sequential scan of it. It logs each page's
// render time (never asserted: CI machines are busy).
func TestListQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewDatabase(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := migrations.Migrate(ctx, conn, migrations.DefaultSchema, nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// The secondary indexes are dropped and built again after the fill
	// (from their own definitions: the schema tested is the migrated one),
	// which is much faster than maintaining them row by row.
	var indexDefs []string
	rows, err := conn.Query(ctx, `SELECT indexdef FROM pg_indexes i
	    WHERE schemaname = 'drainer' AND tablename IN ('intents', 'queue')
	      AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)`)
	if err != nil {
		t.Fatal(err)
	}
	indexDefs, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(indexDefs) == 0 {
		t.Fatalf("intents and queue indexes: %v %v", indexDefs, err)
	}
	fill := []string{`SET maintenance_work_mem = '256MB'`}
	for _, def := range indexDefs {
		name := strings.Fields(strings.SplitN(def, " ON ", 2)[0])
		fill = append(fill, `DROP INDEX drainer.`+name[len(name)-1])
	}
	// One statement, the audit and notify triggers off (a throwaway
	// database): 97% succeeded, 2% pending, the rest spread over the other
	// statuses.
	for _, sql := range append(fill,
		`ALTER TABLE drainer.queue DISABLE TRIGGER USER`,
		`INSERT INTO drainer.intents (key, agent_run_id, step_id, tool_name, business_scope, kind, payload, payload_hash, created_at)
		 SELECT 'idem_v1_big' || i, 'run-' || (i / 5), 's' || (i % 5), 'tool_' || (i % 20), 'scope-' || (i % 50000), 'forward',
		        jsonb_build_object('customer', 'c' || (i % 1000), 'amount', i), '\x00'::bytea,
		        now() - ($1::bigint - i) * interval '10 milliseconds'
		   FROM generate_series(1, $1::bigint) AS i`,
		`INSERT INTO drainer.queue (seq, tool_name, business_scope, kind, status, attempts, lease_token, lease_expires_at, updated_at)
		 SELECT seq, tool_name, business_scope, kind, st, CASE WHEN st = 'pending' THEN 0 ELSE 1 END,
		        CASE WHEN st = 'in_flight' THEN gen_random_uuid() END,
		        CASE WHEN st = 'in_flight' THEN now() + interval '30 seconds' END,
		        created_at
		   FROM (SELECT i.*, CASE
		                WHEN i.seq % 1000 < 970 THEN 'succeeded'
		                WHEN i.seq % 1000 < 990 THEN 'pending'
		                WHEN i.seq % 1000 = 990 THEN 'in_flight'
		                WHEN i.seq % 1000 < 994 THEN 'failed'
		                WHEN i.seq % 1000 < 996 THEN 'outcome_unknown'
		                WHEN i.seq % 1000 < 998 THEN 'cancelled'
		                ELSE 'compensated' END AS st
		           FROM drainer.intents i) g`,
		`ALTER TABLE drainer.queue ENABLE TRIGGER USER`) {
		if _, err := conn.Exec(ctx, sql, bigArgs(sql)...); err != nil {
			t.Fatalf("fill: %v", err)
		}
	}
	inserted := time.Since(start)
	// The plans are judged on one state of the tables, whatever the
	// machine's speed: autovacuum, which would set the visibility map and
	// sample the statistics again at a moment of its own choosing (and
	// with them the plans' costs), is off for them (for the queue's
	// generations: a partitioned table has no storage of its own), and the
	// test vacuums and analyzes them itself, as a long-lived outbox is.
	for _, sql := range append(indexDefs,
		`DO $$ DECLARE t regclass; BEGIN
		   FOR t IN SELECT 'drainer.intents'::regclass UNION ALL
		            SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'drainer.queue'::regclass LOOP
		     EXECUTE format('ALTER TABLE %s SET (autovacuum_enabled = off)', t);
		   END LOOP; END $$`,
		`VACUUM (ANALYZE) drainer.intents`, `VACUUM (ANALYZE) drainer.queue`) {
		if _, err := conn.Exec(ctx, sql, bigArgs(sql)...); err != nil {
			t.Fatalf("index: %v", err)
		}
	}
	t.Logf("filled %d rows in %s (insert %s, indexes and analyze %s)", bigRows, time.Since(start).Round(time.Millisecond),
		inserted.Round(time.Millisecond), (time.Since(start) - inserted).Round(time.Millisecond))

	rec := &recorder{}
	pc, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.Tracer = rec
	pc.ConnConfig.RuntimeParams["jit"] = "off"
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	srv, err := New(Config{Addr: "127.0.0.1:0", Actions: true, Token: testToken,
		Databases: []Database{{Name: "default", DB: pool, Store: store.MustNew("")}}})
	if err != nil {
		t.Fatal(err)
	}
	h := srv.Handler()

	queries := []string{
		"",
		"status=pending",
		"status=succeeded",
		"status=outcome_unknown",
		"status=failed&tool=tool_3",
		"tool=tool_7",
		"run=run-4242",
		"scope=scope-777",
		"older_than=1h",
		"status=pending&older_than=30m",
		"payload=" + url.QueryEscape(`{"customer":"c42"}`),
		"status=pending&payload=" + url.QueryEscape(`{"customer":"c42"}`),
		// Worst cases: filters nothing matches walk the whole key range.
		"payload=" + url.QueryEscape(`{"customer":"nobody"}`),
		"status=succeeded&tool=no_such_tool",
		"tool=no_such_tool",
		"scope=no_such_scope&status=failed",
		"search=idem_v1_big123456",
		"search=run-777",
		"search=scope-31337",
		"after=900000",
		"status=succeeded&after=900000",
	}
	for _, q := range queries {
		for _, path := range []string{"/api/v1/rows?" + q, "/rows?" + q} {
			rec.take()
			w := newRecorderWriter()
			t0 := time.Now()
			h.ServeHTTP(w, httptestRequest(path))
			took := time.Since(t0)
			if w.code != http.StatusOK {
				t.Fatalf("%s: %d %s", path, w.code, w.body.String())
			}
			t.Logf("%-70s %4d B… rendered in %s", path, min(w.body.Len(), 9999), took.Round(time.Microsecond))
			stmts := rec.take()
			if strings.HasPrefix(path, "/rows") {
				continue // the same statements as the API's
			}
			explained := 0
			for _, st := range stmts {
				if !strings.Contains(st.sql, ".outbox") {
					continue
				}
				explained++
				checkPlan(t, pool, q, st)
			}
			if explained == 0 {
				t.Errorf("%s ran no statement on the outbox", path)
			}
		}
	}
	// The dry runs of bulk actions (read-only): the view's keys, then the
	// rows among them, each statement on an index too.
	for _, c := range []struct{ verb, view string }{
		{"requeue", "status=failed"},
		{"requeue", "status=failed&tool=tool_3"},
		{"requeue", "status=pending"}, // 2% of the rows: the first maxBulkRows
		{"requeue", "status=cancelled&search=run-777"},
		{"requeue", "status=failed&search=scope-31337"},
		{"requeue", "status=pending&payload=" + url.QueryEscape(`{"customer":"c42"}`)},
		{"cancel", "status=pending&run=run-4242"},
	} {
		v, _ := url.ParseQuery(c.view)
		v.Set("dry_run", "true")
		req := httptest.NewRequest(http.MethodPost, "/api/v1/actions/"+c.verb, strings.NewReader(v.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer "+testToken)
		rec.take()
		w := newRecorderWriter()
		t0 := time.Now()
		h.ServeHTTP(w, req)
		took := time.Since(t0)
		if w.code != http.StatusSeeOther {
			t.Fatalf("dry run %s %s: %d %s", c.verb, c.view, w.code, w.body.String())
		}
		t.Logf("dry run %-7s %-60s in %s", c.verb, c.view, took.Round(time.Microsecond))
		explained := 0
		for _, st := range rec.take() {
			if strings.Contains(st.sql, ".outbox") {
				explained++
				checkPlan(t, pool, c.view, st)
			}
		}
		if explained == 0 {
			t.Errorf("dry run %s %s ran no statement on the outbox", c.verb, c.view)
		}
	}
}

func bigArgs(sql string) []any {
	if strings.Contains(sql, "$1") {
		return []any{bigRows}
	}
	return nil
}

// checkPlan explains one statement and fails on a sequential scan of the
// tables behind the outbox view (intents, queue), or on a statement that
// reads them through no index.
func checkPlan(t *testing.T, pool *pgxpool.Pool, q string, st recorded) {
	t.Helper()
	var raw []byte
	if err := pool.QueryRow(context.Background(), "EXPLAIN (FORMAT JSON) "+st.sql, st.args...).Scan(&raw); err != nil {
		t.Fatalf("explain %s: %v", st.sql, err)
	}
	var plans []struct {
		Plan map[string]any `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &plans); err != nil {
		t.Fatal(err)
	}
	var seq, idx []string
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		typ, _ := n["Node Type"].(string)
		rel, _ := n["Relation Name"].(string)
		// A payload filter has no index (payloads are arbitrary JSON): with
		// a status it may read the intents in one pass, which the planner
		// prefers to the status index when it expects few matches.
		payloadScan := rel == "intents" && strings.Contains(q, "payload=")
		if (rel == "intents" || rel == "queue") && typ == "Seq Scan" && !payloadScan {
			seq = append(seq, typ+" on "+rel)
		}
		if name, _ := n["Index Name"].(string); strings.HasPrefix(name, "intents_") || strings.HasPrefix(name, "queue_") {
			idx = append(idx, typ+" on "+name)
		}
		if kids, ok := n["Plans"].([]any); ok {
			for _, k := range kids {
				walk(k.(map[string]any))
			}
		}
	}
	walk(plans[0].Plan)
	if len(seq) > 0 || len(idx) == 0 {
		t.Errorf("filter %q: statement\n%s\nplan: %s\nwants an index on intents or queue and no Seq Scan of them", q, st.sql, raw)
		return
	}
	t.Logf("filter %-45q uses %s", q, strings.Join(idx, ", "))
}
