package drainer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func pruneNow() RetentionPolicy {
	return RetentionPolicy{Enabled: true, Retention: store.Retention{BatchSize: 50, Tombstones: time.Hour, Audit: 1000 * time.Hour,
		ByStatus: map[outbox.Status]time.Duration{outbox.StatusSucceeded: time.Millisecond, outbox.StatusFailed: time.Millisecond,
			outbox.StatusCompensated: time.Millisecond, outbox.StatusCancelled: time.Millisecond}}}
}

// TestPruneDuringDrainLosesNothing prunes succeeded rows as fast as possible
// while three engines drain: every intent ends either as a succeeded row or
// as a succeeded tombstone; nothing pending or in flight is ever pruned.
func TestPruneDuringDrainLosesNothing(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	const n = 1500
	keys := enqueueN(t, pool, "run", "t", n)
	a := dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		time.Sleep(time.Millisecond)
		return dispatch.Result{Outcome: dispatch.Success}
	})
	for i := range 2 {
		startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"t": a}, &Route{Tool: "t"}), Config{Workers: 8, ReplicaID: "r" + itoa(i)})
	}
	pruned := 0
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := testStore.Prune(t.Context(), pool, pruneNow().Retention, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		pruned += got[string(outbox.StatusSucceeded)]
		var left int
		if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM drainer.outbox").Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d rows left after 30s", left)
		}
	}
	var tombs, other int
	if err := pool.QueryRow(t.Context(), "SELECT count(*), count(*) FILTER (WHERE final_status <> 'succeeded') FROM drainer.tombstones WHERE key = ANY($1)", keys).Scan(&tombs, &other); err != nil {
		t.Fatal(err)
	}
	if tombs != n || other != 0 || pruned != n {
		t.Fatalf("tombstones %d (non-succeeded %d), pruned %d; want %d succeeded tombstones", tombs, other, pruned, n)
	}
}

// TestTombstoneAnswersLateEnqueue: after its row is pruned, a re-enqueue of
// the same tuple is answered created = false and nothing is dispatched again;
// a different payload is still refused; drainer.result reports the final status.
func TestTombstoneAnswersLateEnqueue(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := t.Context()
	var key string
	if err := pool.QueryRow(ctx, `SELECT key FROM drainer.enqueue('r', 's', 't', 'b', '{"a": 1}')`).Scan(&key); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "UPDATE drainer.outbox SET status = 'succeeded', updated_at = now() - interval '1 day'"); err != nil {
		t.Fatal(err)
	}
	if got, err := testStore.Prune(ctx, pool, pruneNow().Retention, time.Second); err != nil || got[string(outbox.StatusSucceeded)] != 1 {
		t.Fatalf("prune: %v %v", got, err)
	}
	var created bool
	var again string
	if err := pool.QueryRow(ctx, `SELECT key, created FROM drainer.enqueue('r', 's', 't', 'b', '{"a": 1}')`).Scan(&again, &created); err != nil || created || again != key {
		t.Fatalf("late re-enqueue: key %s created %v err %v", again, created, err)
	}
	var rows int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM drainer.outbox").Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("late re-enqueue created %d rows", rows)
	}
	_, err := pool.Exec(ctx, `SELECT drainer.enqueue('r', 's', 't', 'b', '{"a": 2}')`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" || !strings.Contains(pgErr.Message, key) {
		t.Fatalf("different payload after prune: %v", err)
	}
	var status string
	if err := pool.QueryRow(ctx, "SELECT status FROM drainer.result($1)", key).Scan(&status); err != nil || status != "succeeded" {
		t.Fatalf("result after prune: %s %v", status, err)
	}
}

// TestPruneSkipsOpenSagasAndParkedRows: rows of a run whose saga is open,
// and parked rows, are never pruned.
func TestPruneSkipsOpenSagasAndParkedRows(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := t.Context()
	for _, q := range []string{
		`SELECT drainer.enqueue('saga-run', 's1', 't', '', '{}')`,
		`SELECT drainer.enqueue('other', 's1', 't', '', '{}')`,
		`SELECT drainer.enqueue('other', 's2', 't', '', '{}')`,
		`UPDATE drainer.outbox SET status = 'succeeded', updated_at = now() - interval '1 day' WHERE agent_run_id = 'saga-run' OR step_id = 's1'`,
		`UPDATE drainer.outbox SET status = 'outcome_unknown', updated_at = now() - interval '1 day' WHERE agent_run_id = 'other' AND step_id = 's2'`,
		`INSERT INTO drainer.runs (agent_run_id, abort_reason, aborted_by, saga_state) VALUES ('saga-run', 'x', 'test', 'compensating')`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	got, err := testStore.Prune(ctx, pool, pruneNow().Retention, time.Second)
	if err != nil || got[string(outbox.StatusSucceeded)] != 1 {
		t.Fatalf("prune: %v %v; want only the row of the run without an open saga", got, err)
	}
	left := countByStatus(t, pool)
	if left["succeeded"] != 1 || left["outcome_unknown"] != 1 {
		t.Fatalf("rows left %v", left)
	}
}

// TestAuditPruneKeepsChainsVerifiable: prune_audit, still called by older
// replicas, deletes no entry (entries leave only by the rotation, which
// verifies a generation before it anchors and truncates it); chains
// extended afterwards still verify, and tampering is still caught.
func TestAuditPruneKeepsChainsVerifiable(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := t.Context()
	keys := enqueueN(t, pool, "run", "t", 3)
	for _, st := range []string{"in_flight", "pending", "in_flight", "pending"} {
		if _, err := pool.Exec(ctx, "UPDATE drainer.outbox SET status = $1, lease_token = CASE WHEN $1 = 'in_flight' THEN gen_random_uuid() END, attempts = attempts + 1", st); err != nil {
			t.Fatal(err)
		}
	}
	var entries int
	// 3 enqueued + 2 × 3 attempts ended (in_flight -> pending); claims
	// write no entry of their own.
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM drainer.audit").Scan(&entries); err != nil || entries != 9 {
		t.Fatalf("audit entries %d (%v), want 9", entries, err)
	}
	// An older replica's prune of the 5 oldest entries deletes none.
	if _, err := pool.Exec(ctx, "SELECT drainer.prune_audit(now(), 5)"); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM drainer.audit").Scan(&entries); err != nil || entries != 9 {
		t.Fatalf("audit entries after prune_audit %d (%v), want all 9 kept", entries, err)
	}
	if _, err := pool.Exec(ctx, "UPDATE drainer.outbox SET status = 'cancelled' WHERE key = $1", keys[0]); err != nil {
		t.Fatal(err)
	}
	var broken int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM drainer.audit_verify(100)").Scan(&broken); err != nil || broken != 0 {
		t.Fatalf("audit_verify after pruning: %d broken links (%v)", broken, err)
	}
	// Prune everything of a chain; new entries still link to its anchor.
	if _, err := pool.Exec(ctx, "SELECT drainer.prune_audit(now(), 1000)"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "UPDATE drainer.outbox SET status = 'cancelled' WHERE key = $1", keys[1]); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM drainer.audit_verify(100)").Scan(&broken); err != nil || broken != 0 {
		t.Fatalf("audit_verify after pruning whole chains: %d broken links (%v)", broken, err)
	}
	// And tampering is still caught.
	if _, err := pool.Exec(ctx, "UPDATE drainer.audit SET actor = 'mallory' WHERE id = (SELECT max(id) FROM drainer.audit)"); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM drainer.audit_verify(100)").Scan(&broken); err != nil || broken != 1 {
		t.Fatalf("edited entry: %d broken links (%v), want 1", broken, err)
	}
}

// TestSnapshotEstimatesAtScale uses the planner's statistics for terminal
// statuses once the table is "large", and still counts work exactly.
func TestSnapshotEstimatesAtScale(t *testing.T) {
	pool := newPool(t)
	ctx := t.Context()
	old := store.ExactCountLimit
	store.ExactCountLimit = 100
	t.Cleanup(func() { store.ExactCountLimit = old })
	if _, err := pool.Exec(ctx, `INSERT INTO drainer.outbox (key, agent_run_id, step_id, tool_name, payload, payload_hash, status)
	      SELECT 'k' || g, 'run', 's' || g, 't', '{}', '\x00', CASE WHEN g % 4 = 0 THEN 'pending' ELSE 'succeeded' END
	        FROM generate_series(1, 4000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "ANALYZE drainer.queue"); err != nil {
		t.Fatal(err)
	}
	if ok, err := testStore.RefreshSnapshot(ctx, pool, time.Hour, []string{"t"}); err != nil || !ok {
		t.Fatalf("refresh: %v %v", ok, err)
	}
	s, ok, err := testStore.ReadSnapshot(ctx, pool)
	if err != nil || !ok {
		t.Fatal(err)
	}
	if s.RowsByStatus["pending"] != 1000 {
		t.Fatalf("pending counted %d, want exactly 1000", s.RowsByStatus["pending"])
	}
	if est := s.RowsByStatus["succeeded"]; est < 2700 || est > 3300 || len(s.Stats.Estimated) == 0 {
		t.Fatalf("succeeded estimated as %d (estimated %v), want about 3000", est, s.Stats.Estimated)
	}
	if s.Stats.LiveTuples == 0 {
		t.Fatalf("table stats missing: %+v", s.Stats)
	}
}

// TestSnapshotUnroutedAndScrapeNeverBlocks: unrouted tools show by tool, and
// a metrics scrape answers at once even while the snapshot's query is stuck
// behind a lock.
func TestSnapshotUnroutedAndScrapeNeverBlocks(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := t.Context()
	enqueueN(t, pool, "run", "mystery_tool", 3)
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg, "test")
	startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"t": dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		return dispatch.Result{Outcome: dispatch.Success}
	})}, &Route{Tool: "t"}), Config{Workers: 2, Metrics: metrics})
	testkit.WaitFor(t, 10*time.Second, "unrouted tool in the snapshot", func() (bool, string) {
		s, ok, err := testStore.ReadSnapshot(ctx, pool)
		return err == nil && ok && len(s.Stats.Unrouted) == 1 && s.Stats.Unrouted[0].Tool == "mystery_tool" && s.Stats.Unrouted[0].Rows == 3, ""
	})
	scrape := func() string {
		rec := httptest.NewRecorder()
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if rec.Code != http.StatusOK {
			return ""
		}
		return rec.Body.String()
	}
	// The gauges follow the snapshots the engine reads back (one may have
	// been taken while the engine was looking at one of the rows: the
	// value moves between snapshots).
	testkit.WaitFor(t, 10*time.Second, "unrouted rows on the metrics", func() (bool, string) {
		return strings.Contains(scrape(), `drainer_unrouted_rows{tool="mystery_tool"} 3`), ""
	})
	// Block every query on the outbox, then scrape. The outbox is a view
	// over several tables, locked one after another while the engine
	// works on them: the deadlock detector may pick this transaction, and
	// then it asks again.
	var tx pgx.Tx
	for attempt := 1; ; attempt++ {
		var err error
		if tx, err = pool.Begin(ctx); err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec(ctx, "LOCK TABLE drainer.outbox IN ACCESS EXCLUSIVE MODE")
		if err == nil {
			break
		}
		tx.Rollback(context.Background())
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "40P01" || attempt == 20 {
			t.Fatalf("lock the outbox (attempt %d): %v", attempt, err)
		}
	}
	defer tx.Rollback(context.Background())
	time.Sleep(500 * time.Millisecond) // the snapshot loop is now stuck on the lock
	var done atomic.Bool
	go func() {
		// the gauge the last snapshot read before the lock left
		done.Store(strings.Contains(scrape(), `drainer_unrouted_rows{tool="mystery_tool"} `))
	}()
	testkit.WaitFor(t, 2*time.Second, "scrape answered while the table is locked", func() (bool, string) { return done.Load(), "" })
}

// TestAuditRotatesWhateverAStepTakes: a rotation step of the audit does
// work that grows with its generation (the anchoring and the truncation
// digest every entry of it, the sweep every version of an anchors record),
// so it runs to its end: neither the retention pass's bound on its
// batches nor a statement_timeout set for drainer's sessions ends it. Each
// would end every anchoring of a large enough generation at the same
// point, pass after pass, and the audit would never rotate again (a bound
// of two minutes on the whole pass did so past a few million entries).
// Here both bounds are 100 ms, and anchoring 30,000 entries takes longer.
func TestAuditRotatesWhateverAStepTakes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	base := newPool(t)
	const n = 30_000
	enqueueN(t, base, "run-rotates", "t", n)
	// The daemon's sessions, with a statement_timeout its operator set.
	cfg := base.Config()
	cfg.ConnConfig.RuntimeParams = map[string]string{"options": "-c statement_timeout=100ms"}
	store.SessionDefaults(cfg.ConnConfig)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var timeout string
	if err := pool.QueryRow(ctx, "SHOW statement_timeout").Scan(&timeout); err != nil || timeout != "100ms" {
		t.Fatalf("statement_timeout of the daemon's sessions: %q, %v; want 100ms", timeout, err)
	}
	var logs testkit.Buffer
	e, err := New(pool, testRouting(t, map[string]dispatch.Adapter{}), Config{Workers: 1, BatchSize: 1,
		Metrics: NewMetrics(prometheus.NewRegistry(), "test"), Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	keep := 1000 * time.Hour
	p := RetentionPolicy{Enabled: true, Retention: store.Retention{BatchSize: 50, BatchTimeout: 100 * time.Millisecond,
		Tombstones: keep, Audit: time.Second, ByStatus: map[outbox.Status]time.Duration{outbox.StatusSucceeded: keep,
			outbox.StatusFailed: keep, outbox.StatusCompensated: keep, outbox.StatusCancelled: keep}}}
	passes := 0
	testkit.WaitFor(t, 5*time.Minute, "the generation of the 30,000 entries truncated", func() (bool, string) {
		e.pruneOnce(ctx, p)
		passes++
		var left int
		if err := base.QueryRow(ctx, "SELECT count(*) FROM drainer.audit").Scan(&left); err != nil {
			t.Fatal(err)
		}
		return left == 0, fmt.Sprintf("%d entries left after %d passes; logs:\n%s", left, passes, logs.String())
	})
	var anchors int
	if err := base.QueryRow(ctx, "SELECT count(*) FROM drainer.audit_anchors").Scan(&anchors); err != nil || anchors != n {
		t.Fatalf("%d anchors (%v), want one for each of the %d chains", anchors, err, n)
	}
}

// TestTombstonesOutliveEveryKeyTTL: a tombstone outlives its key at the
// provider (docs/reference.md §2). The config's key_ttls and their types'
// defaults are checked at load; a window the provider reports at start is
// known only at run time, so the pruner keeps tombstones that long,
// whatever retention.tombstones says, says so once, and follows the window
// when it changes.
func TestTombstonesOutliveEveryKeyTTL(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := newPool(t)
	var key string
	if err := pool.QueryRow(ctx, `SELECT key FROM drainer.enqueue('r', 's', 't', 'b', '{"a": 1}')`).Scan(&key); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "UPDATE drainer.outbox SET status = 'succeeded', updated_at = now() - interval '1 day'"); err != nil {
		t.Fatal(err)
	}
	rt := testRouting(t, map[string]dispatch.Adapter{"t": dispatch.AdapterFunc(func(context.Context, *dispatch.Message) dispatch.Result {
		return dispatch.Result{Outcome: dispatch.Success}
	})}, &Route{Tool: "t"})
	entry, _ := rt.Registry.Get("t")
	entry.KeyTTL, entry.KeyTTLFromProvider, entry.ProviderWindow = time.Hour, true, time.Hour
	rt.Retention = pruneNow()
	rt.Retention.Tombstones = time.Second
	var logs testkit.Buffer
	e, err := New(pool, rt, Config{Workers: 1, Metrics: NewMetrics(prometheus.NewRegistry(), "test"),
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	var told time.Duration
	pass := func() time.Duration {
		p, ok := e.retention(rt, &told)
		if !ok {
			t.Fatal("retention enabled, yet no pass")
		}
		e.pruneOnce(ctx, p)
		return p.Tombstones
	}
	tombstones := func() int {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM drainer.tombstones WHERE key = $1", key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if kept := pass(); kept != time.Hour || tombstones() != 1 {
		t.Fatalf("first pass: tombstones kept %s (want the provider's window, 1h), %d tombstone(s) of the pruned row", kept, tombstones())
	}
	if _, err := pool.Exec(ctx, "UPDATE drainer.keys SET pruned_at = now() - interval '1 minute' WHERE key = $1", key); err != nil {
		t.Fatal(err)
	}
	pass()
	var created bool
	if err := pool.QueryRow(ctx, `SELECT created FROM drainer.enqueue('r', 's', 't', 'b', '{"a": 1}')`).Scan(&created); err != nil || created {
		t.Fatalf("a re-enqueue a minute after the prune, within the key's 1h window: created %v (%v), want the tombstone's answer", created, err)
	}
	if n := strings.Count(logs.String(), "tombstones kept longer than retention.tombstones"); n != 1 {
		t.Errorf("%d warnings over two passes, want 1:\n%s", n, logs.String())
	}
	entry.SetProviderWindow(30 * time.Second)
	if kept := pass(); kept != 30*time.Second || tombstones() != 0 {
		t.Fatalf("the window down to 30s: tombstones kept %s, %d tombstone(s) a minute old left, want 30s and none", kept, tombstones())
	}
}
