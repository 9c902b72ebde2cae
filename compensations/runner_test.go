package compensations

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// wait bounds every wait for the runner: generous, so that only a runner
// that never does what is awaited fails.
const wait = 60 * time.Second

// never is a sweep interval no test outlives: only events move its sagas.
const never = time.Hour

// testRouting is a Routing whose alert switch a test flips, and which
// counts the passes that read it.
type testRouting struct {
	m      Map
	alerts atomic.Bool
	reads  atomic.Int64
}

func newRouting(comp map[string]string) *testRouting { return &testRouting{m: NewMap(comp)} }

func (r *testRouting) get() (Map, bool) {
	r.reads.Add(1)
	return r.m, r.alerts.Load()
}

// shop is the routing of the tests' runs: charge_card is undone by
// refund_card, reserve_stock by release_stock; send_email by nothing.
func shop() *testRouting {
	return newRouting(map[string]string{"charge_card": "refund_card", "reserve_stock": "release_stock", "send_email": ""})
}

// logRecords keeps what a runner logs.
type logRecords struct {
	mu      sync.Mutex
	records []string // "LEVEL msg key=value …"
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecords) WithGroup(string) slog.Handler            { return l }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
	l.mu.Lock()
	l.records = append(l.records, line)
	l.mu.Unlock()
	return nil
}

// find returns the first record that holds every part, or "".
func (l *logRecords) find(parts ...string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
next:
	for _, rec := range l.records {
		for _, p := range parts {
			if !strings.Contains(rec, p) {
				continue next
			}
		}
		return rec
	}
	return ""
}

type harness struct {
	t       *testing.T
	pool    *pgxpool.Pool
	routing *testRouting
	logs    *logRecords
	queued  atomic.Int64
	runner  *Runner
}

// newHarness returns a runner on a fresh migrated database, not started.
func newHarness(t *testing.T, routing *testRouting, sweep time.Duration) *harness {
	t.Helper()
	h := &harness{t: t, pool: storetest.NewPool(t), routing: routing, logs: &logRecords{}}
	h.runner = NewRunner(RunnerConfig{
		Pool:          h.pool,
		Store:         store.MustNew(storetest.Schema),
		Routing:       routing.get,
		SweepInterval: sweep,
		Queued:        func() { h.queued.Add(1) },
		Logger:        slog.New(h.logs),
	})
	return h
}

// start starts the runner and stops it when the test ends (before the
// pool closes).
func (h *harness) start() {
	h.t.Helper()
	if err := h.runner.Start(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = h.runner.Stop(context.Background()) })
}

func (h *harness) exec(sql string, args ...any) {
	h.t.Helper()
	if _, err := h.pool.Exec(context.Background(), sql, args...); err != nil {
		h.t.Fatalf("%s: %v", sql, err)
	}
}

func (h *harness) text(sql string, args ...any) string {
	h.t.Helper()
	var s string
	if err := h.pool.QueryRow(context.Background(), sql, args...).Scan(&s); err != nil {
		h.t.Fatalf("%s: %v", sql, err)
	}
	return s
}

// succeeded enqueues step of run for tool, as an agent does, and records
// that the provider carried it out.
func (h *harness) succeeded(run, step, tool string) string {
	h.t.Helper()
	key := h.text(`SELECT key FROM drainer.enqueue($1, $2, $3, 'order:1', $4::jsonb)`,
		run, step, tool, fmt.Sprintf(`{"step":%q}`, step))
	h.exec(`UPDATE drainer.outbox SET status = 'succeeded', attempts = 1, first_attempt_at = now(), response = '{"ok":true}'
	         WHERE key = $1`, key)
	return key
}

// abort aborts run as an operator does.
func (h *harness) abort(run string) {
	h.t.Helper()
	h.exec(`SELECT drainer.abort_run_internal($1, 'test abort', 'drainer')`, run)
}

// compensations returns run's compensation rows in enqueue order, as
// "tool:status".
func (h *harness) compensations(run string) string {
	h.t.Helper()
	return h.text(`SELECT coalesce(string_agg(tool_name || ':' || status, ' ' ORDER BY seq), '')
	                 FROM drainer.outbox WHERE agent_run_id = $1 AND kind = 'compensation'`, run)
}

func (h *harness) sagaState(run string) string {
	h.t.Helper()
	return h.text(`SELECT coalesce(max(saga_state), '') FROM drainer.runs WHERE agent_run_id = $1`, run)
}

// alerts counts the alert rows queued for the compensation rows of run.
func (h *harness) alerts(run string) int {
	h.t.Helper()
	var n int
	err := h.pool.QueryRow(context.Background(), `SELECT count(*) FROM drainer.outbox
	        WHERE tool_name = drainer.alert_tool() AND business_scope = $1`, run).Scan(&n)
	if err != nil {
		h.t.Fatal(err)
	}
	return n
}

// settleCompensation records the provider's answer to run's open
// compensation row.
func (h *harness) settleCompensation(run, status string) {
	h.t.Helper()
	h.exec(`UPDATE drainer.outbox SET status = $2, attempts = 1, first_attempt_at = now(),
	               response = CASE WHEN $2 = 'succeeded' THEN '{}'::jsonb END,
	               last_error = CASE WHEN $2 <> 'succeeded' THEN 'refused' END
	         WHERE agent_run_id = $1 AND kind = 'compensation' AND status = 'pending'`, run, status)
}

func (h *harness) waitFor(what string, cond func() (bool, string)) {
	h.t.Helper()
	testkit.WaitFor(h.t, wait, what, cond)
}

func (h *harness) waitCompensations(run, want string) {
	h.t.Helper()
	h.waitFor(run+"'s compensations "+want, func() (bool, string) {
		got := h.compensations(run)
		return got == want, got
	})
}

// TestNotifyCompensatesInReverseOrder: the sweep never runs here, so only
// Notify moves the saga: each succeeded forward row of a compensable tool
// is undone by its own compensation tool, one at a time, the latest first,
// and a tool without a compensation is left alone; once every compensation
// succeeded the saga is done and its forward rows compensated.
func TestNotifyCompensatesInReverseOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t, shop(), never)
	h.start()
	charge := h.succeeded("order-1", "s1", "charge_card")
	reserve := h.succeeded("order-1", "s2", "reserve_stock")
	email := h.succeeded("order-1", "s3", "send_email")
	h.abort("order-1")

	h.runner.Notify("order-1")
	h.waitCompensations("order-1", "release_stock:pending")
	h.settleCompensation("order-1", "succeeded")
	h.runner.Notify("order-1")
	h.waitCompensations("order-1", "release_stock:succeeded refund_card:pending")
	h.settleCompensation("order-1", "succeeded")
	h.runner.Notify("order-1")
	h.waitFor("order-1's saga done", func() (bool, string) {
		s := h.sagaState("order-1")
		return s == "done", s
	})

	if got := h.compensations("order-1"); got != "release_stock:succeeded refund_card:succeeded" {
		t.Errorf("compensations %s; want release_stock, then refund_card, each once", got)
	}
	for key, want := range map[string]string{charge: "compensated", reserve: "compensated", email: "succeeded"} {
		if got := h.text(`SELECT status FROM drainer.outbox WHERE key = $1`, key); got != want {
			t.Errorf("forward row %s is %s; want %s", key, got, want)
		}
	}
}

// TestNotifyBeforeStart: runs notified before Start are advanced once it
// starts, without waiting for a sweep; notifying never blocks.
func TestNotifyBeforeStart(t *testing.T) {
	t.Parallel()
	h := newHarness(t, shop(), never)
	for _, run := range []string{"a", "b"} {
		h.succeeded(run, "s1", "charge_card")
		h.abort(run)
	}
	h.runner.Notify()
	h.runner.Notify("a")
	h.runner.Notify("b")
	h.runner.Notify("a")
	h.start()
	for _, run := range []string{"a", "b"} {
		h.waitCompensations(run, "refund_card:pending")
	}
}

// plantWaiting creates n aborted runs prefix-0001 … directly, each with a
// succeeded charge_card row and no compensation yet, as if every event that
// should have advanced them was lost.
func (h *harness) plantWaiting(prefix string, n int) {
	h.t.Helper()
	h.exec(`
	    WITH r AS (
	        INSERT INTO drainer.runs (agent_run_id, abort_reason, aborted_by, saga_state)
	        SELECT $1 || '-' || lpad(g::text, 4, '0'), 'planted', 'drainer', 'waiting' FROM generate_series(1, $2) g
	        RETURNING agent_run_id)
	    INSERT INTO drainer.outbox (key, agent_run_id, step_id, tool_name, business_scope, kind, payload, payload_hash,
	                                status, attempts, first_attempt_at, response)
	    SELECT drainer.idempotency_key(r.agent_run_id, 's1', 'charge_card', ''), r.agent_run_id, 's1', 'charge_card', '',
	           'forward', '{}', drainer.payload_hash('{}'), 'succeeded', 1, now(), '{}'
	      FROM r`, prefix, n)
}

// TestSweepReachesEverySaga: with no event at all, the sweep advances
// every active saga, also beyond the first SweepBatch of them (which stay
// active, their compensations pending): it goes on from where the last
// batch ended.
func TestSweepReachesEverySaga(t *testing.T) {
	t.Parallel()
	h := newHarness(t, shop(), 5*time.Millisecond)
	n := SweepBatch + SweepBatch/2
	h.plantWaiting("lost", n)
	h.start()
	h.waitFor(fmt.Sprintf("a compensation for each of the %d lost sagas", n), func() (bool, string) {
		var have int
		var first string
		err := h.pool.QueryRow(context.Background(), `
		    SELECT count(c.key), coalesce(min(r.agent_run_id) FILTER (WHERE c.key IS NULL), '')
		      FROM drainer.runs r
		      LEFT JOIN drainer.outbox c ON c.agent_run_id = r.agent_run_id AND c.kind = 'compensation'
		     WHERE r.agent_run_id LIKE 'lost-%'`).Scan(&have, &first)
		if err != nil {
			t.Fatal(err)
		}
		return have == n, fmt.Sprintf("%d have one; the first without: %s", have, first)
	})
	if got := h.text(`SELECT string_agg(DISTINCT saga_state, ',') FROM drainer.runs`); got != "compensating" {
		t.Errorf("saga states %s; want compensating", got)
	}
}

// TestHaltedSagaAlerts: a saga halted by a compensation_failed row queues
// that row's alert when an alert adapter is configured (and says so through
// Queued), and none while there is none.
func TestHaltedSagaAlerts(t *testing.T) {
	t.Parallel()
	h := newHarness(t, shop(), never)
	h.start()
	h.succeeded("refused", "s1", "charge_card")
	h.abort("refused")
	h.runner.Notify("refused")
	h.waitCompensations("refused", "refund_card:pending")
	h.settleCompensation("refused", "compensation_failed")

	// No alert adapter: the saga halts, no alert is queued.
	reads := h.routing.reads.Load()
	h.runner.Notify("refused")
	h.waitFor("the refused saga halted", func() (bool, string) {
		s := h.sagaState("refused")
		return s == "halted", s
	})
	// One pass at a time: once a later pass read the routing, the one
	// that halted the saga is over, with whatever it queued.
	h.succeeded("probe", "s1", "charge_card")
	h.abort("probe")
	h.runner.Notify("probe")
	h.waitCompensations("probe", "refund_card:pending")
	if got := h.routing.reads.Load(); got < reads+2 {
		t.Fatalf("routing read %d times by the two passes; want 2", got-reads)
	}
	if n := h.alerts("refused"); n != 0 || h.queued.Load() != 0 {
		t.Fatalf("%d alerts queued (Queued called %d times) without an alert adapter; want none", n, h.queued.Load())
	}

	// With one: the halted saga's alert is queued, once.
	h.routing.alerts.Store(true)
	h.runner.Notify("refused")
	h.waitFor("the refused compensation's alert", func() (bool, string) {
		n := h.alerts("refused")
		return n > 0 && h.queued.Load() > 0, fmt.Sprintf("%d alerts, Queued called %d times", n, h.queued.Load())
	})
	if n := h.alerts("refused"); n != 1 {
		t.Errorf("%d alerts; want 1", n)
	}
	if rec := h.logs.find("ERROR", "agent_run_id=refused tool_name=refund_card"); rec == "" || !strings.Contains(rec, "key=idem_v1_") {
		t.Errorf("no error naming the failed compensation's key, run and tool; logged:\n%s", strings.Join(h.logs.records, "\n"))
	}
}

// TestSweepAlertsHaltedSagas: the sweep leaves halted sagas alone (only a
// human's resolve moves them), but with an alert adapter its first pass
// queues the alert of every compensation_failed row that has none, so an
// alert whose event was lost is still sent.
func TestSweepAlertsHaltedSagas(t *testing.T) {
	t.Parallel()
	routing := shop()
	routing.alerts.Store(true)
	h := newHarness(t, routing, 5*time.Millisecond)
	for _, run := range []string{"x", "y"} {
		h.succeeded(run, "s1", "charge_card")
		h.abort(run)
		// As the runner would have, before the process that halted the
		// saga stopped without queueing the alert.
		if _, err := store.MustNew(storetest.Schema).AdvanceSaga(context.Background(), h.pool, run, routing.m); err != nil {
			t.Fatal(err)
		}
		h.settleCompensation(run, "compensation_failed")
		h.exec(`UPDATE drainer.runs SET saga_state = 'halted' WHERE agent_run_id = $1`, run)
	}
	h.start()
	h.waitFor("both halted sagas alerted", func() (bool, string) {
		x, y := h.alerts("x"), h.alerts("y")
		return x == 1 && y == 1, fmt.Sprintf("x %d, y %d", x, y)
	})
	if q := h.queued.Load(); q == 0 {
		t.Error("Queued not called after alerts were queued")
	}
}

// TestBusyRunIsTriedAgain: while another replica holds a run's saga, the
// runner finds it busy and tries again by itself, so the saga moves once
// the other lets go, with no further event and no sweep.
func TestBusyRunIsTriedAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t, shop(), never)
	h.succeeded("held", "s1", "charge_card")
	h.abort("held")

	other, err := h.pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback(context.Background()) }()
	if _, err := other.Exec(context.Background(), `SELECT pg_advisory_xact_lock(drainer.saga_lock_key('held'))`); err != nil {
		t.Fatal(err)
	}
	h.start()
	h.runner.Notify("held")
	h.waitFor("the runner to try the held run again", func() (bool, string) {
		n := h.routing.reads.Load()
		return n >= 3, fmt.Sprintf("%d passes", n)
	})
	if got := h.compensations("held"); got != "" {
		t.Fatalf("compensations %q while another holds the saga; want none", got)
	}
	if err := other.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.waitCompensations("held", "refund_card:pending")
}

// TestFailedStepDoesNotHoldBackOthers: a run whose step fails in the
// database is logged and left to the sweep; the runs notified with it are
// advanced all the same, whichever order the pass takes them in. In the
// sweep, its failure is noted on the run and logged, and the sweep goes on.
func TestFailedStepDoesNotHoldBackOthers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, shop(), never)
	const ok, poisoned = 18, 2
	h.plantWaiting("ok", ok)
	h.plantWaiting("poison", poisoned)
	h.exec(`
	    CREATE FUNCTION drainer.test_poison() RETURNS trigger LANGUAGE plpgsql AS $$
	    BEGIN
	        IF NEW.agent_run_id LIKE 'poison-%' AND NEW.kind = 'compensation' THEN
	            RAISE EXCEPTION 'poisoned compensation';
	        END IF;
	        RETURN NEW;
	    END $$;
	    CREATE TRIGGER test_poison BEFORE INSERT ON drainer.intents FOR EACH ROW EXECUTE FUNCTION drainer.test_poison()`)
	h.start()
	var runs []string
	for i := 1; i <= ok; i++ {
		runs = append(runs, fmt.Sprintf("ok-%04d", i))
	}
	h.runner.Notify(append(runs, "poison-0001", "poison-0002")...)
	for _, run := range runs {
		h.waitCompensations(run, "refund_card:pending")
	}
	h.waitFor("the poisoned steps logged", func() (bool, string) {
		return h.logs.find("WARN", "agent_run_id=poison-0001", "poisoned compensation") != "" &&
			h.logs.find("WARN", "agent_run_id=poison-0002", "poisoned compensation") != "", ""
	})
	if got := h.compensations("poison-0001"); got != "" {
		t.Errorf("poisoned run's compensations %q; want none", got)
	}

	// The sweep: a second runner sweeping often, on the same database.
	sweeper := NewRunner(RunnerConfig{Pool: h.pool, Store: store.MustNew(storetest.Schema), Routing: h.routing.get,
		SweepInterval: 5 * time.Millisecond, Logger: slog.New(h.logs)})
	if err := sweeper.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sweeper.Stop(context.Background()) })
	h.waitFor("the poisoned step noted on its run", func() (bool, string) {
		note := h.text(`SELECT coalesce(saga_note, '') FROM drainer.runs WHERE agent_run_id = 'poison-0001'`)
		return strings.Contains(note, "poisoned compensation") &&
			h.logs.find("ERROR", "agent_run_id=poison-0001", "poisoned compensation") != "", note
	})
}

// TestStartStop: Stop before Start and a second Stop are harmless, a
// second Start is refused, and Stop returns only once the pass under way
// has ended.
func TestStartStop(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	var inPass atomic.Bool
	r := NewRunner(RunnerConfig{
		Pool:  pool,
		Store: store.MustNew(storetest.Schema),
		Routing: func() (Map, bool) {
			inPass.Store(true)
			defer inPass.Store(false)
			select {
			case entered <- struct{}{}:
			default:
			}
			<-release
			return Map{}, false
		},
		SweepInterval: 5 * time.Millisecond,
	})
	if err := r.Stop(context.Background()); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err == nil {
		t.Error("a second Start succeeded; want an error")
	}
	select {
	case <-entered:
	case <-time.After(wait):
		close(release)
		t.Fatalf("no sweep within %s", wait)
	}
	stopped := make(chan bool)
	go func() {
		_ = r.Stop(context.Background())
		stopped <- inPass.Load()
	}()
	// Give a Stop that does not wait for the pass the time to return.
	time.Sleep(50 * time.Millisecond)
	close(release)
	if <-stopped {
		t.Error("Stop returned while a pass was under way")
	}
	if err := r.Stop(context.Background()); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}
