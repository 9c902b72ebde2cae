package drainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/compensations"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// recorder is a provider double that records every call in order.
type recorder struct {
	mu    sync.Mutex
	calls []dispatch.Message
	fn    func(m *dispatch.Message) dispatch.Result
}

func (r *recorder) Dispatch(_ context.Context, m *dispatch.Message) dispatch.Result {
	r.mu.Lock()
	r.calls = append(r.calls, *m)
	r.mu.Unlock()
	if r.fn != nil {
		return r.fn(m)
	}
	return dispatch.Result{Outcome: dispatch.Success, Response: json.RawMessage(`{"ok":true}`)}
}

func (r *recorder) tools() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, c := range r.calls {
		out = append(out, c.Tuple.AgentRunID+"/"+c.Tuple.StepID+"/"+c.Tuple.ToolName)
	}
	return out
}

func (r *recorder) count(tool string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		if c.Tuple.ToolName == tool {
			n++
		}
	}
	return n
}

func sagaRoutes() []*Route {
	return []*Route{
		{Tool: "charge_card", Adapter: "p", Compensation: "refund_card"},
		{Tool: "reserve_stock", Adapter: "p", Compensation: "release_stock"},
		{Tool: "send_email", Adapter: "p"},
		{Tool: "ship_order", Adapter: "p", Compensation: "cancel_shipment"},
		{Tool: "refund_card", Adapter: "p", MaxAttempts: 3},
		{Tool: "release_stock", Adapter: "p", MaxAttempts: 3},
		{Tool: "cancel_shipment", Adapter: "p", MaxAttempts: 3},
	}
}

func enqueueStep(t testing.TB, pool *pgxpool.Pool, run, step, tool string) string {
	t.Helper()
	var key string
	err := pool.QueryRow(context.Background(), `SELECT key FROM drainer.enqueue($1, $2, $3, 'order:1', $4::jsonb)`,
		run, step, tool, fmt.Sprintf(`{"step":%q}`, step)).Scan(&key)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// sagaSwept returns once a saga sweep that began after the call has
// committed. It records probe as an aborted run with no rows, a waiting
// saga of which the saga runner hears nothing (no abort, no completion):
// only a sweep can finish it. A sweep advances every waiting or
// compensating saga it listed at its start in one statement, so once the
// probe's saga is done, every saga then open was advanced by a sweep
// committed with it.
func sagaSwept(t testing.TB, pool *pgxpool.Pool, probe string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `INSERT INTO drainer.runs (agent_run_id, abort_reason, aborted_by)
	    VALUES ($1, 'a probe of the saga sweep', 'test')`, probe); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "a saga sweep to finish "+probe, func() (bool, string) {
		var s outbox.SagaState
		if err := pool.QueryRow(context.Background(), "SELECT saga_state FROM drainer.runs WHERE agent_run_id = $1", probe).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s == outbox.SagaDone, string(s)
	})
}

// compensationRows lists run's compensation rows as tool/status, in order.
func compensationRows(t testing.TB, pool *pgxpool.Pool, run string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT tool_name || '/' || status FROM drainer.outbox
	    WHERE agent_run_id = $1 AND kind = 'compensation' ORDER BY seq`, run)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sagaState(t testing.TB, pool *pgxpool.Pool, run string) outbox.SagaState {
	t.Helper()
	var s outbox.SagaState
	err := pool.QueryRow(context.Background(), "SELECT saga_state FROM drainer.sagas WHERE agent_run_id = $1", run).Scan(&s)
	if errors.Is(err, pgx.ErrNoRows) {
		return "" // not aborted (yet)
	}
	if err != nil {
		t.Fatalf("saga of %s: %v", run, err)
	}
	return s
}

// TestSagaAfterTerminalFailure: a 3-step run whose third step fails
// terminally has its first two steps compensated once each, in reverse order.
func TestSagaAfterTerminalFailure(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	p := &recorder{fn: func(m *dispatch.Message) dispatch.Result {
		if m.Tuple.ToolName == "ship_order" && m.Tuple.AgentRunID == "bad" {
			return dispatch.Result{Outcome: dispatch.Terminal, Status: 422, Err: errors.New("http 422: address refused")}
		}
		return dispatch.Result{Outcome: dispatch.Success, Response: json.RawMessage(`{"id":"` + m.Key + `"}`)}
	}}
	keys := map[string]string{}
	for _, run := range []string{"good", "bad"} {
		keys[run+"1"] = enqueueStep(t, pool, run, "s1", "charge_card")
		keys[run+"2"] = enqueueStep(t, pool, run, "s2", "reserve_stock")
		keys[run+"3"] = enqueueStep(t, pool, run, "s3", "ship_order")
	}
	// Steps run in order: each becomes due after the previous one.
	if _, err := pool.Exec(t.Context(), `UPDATE drainer.outbox SET next_attempt_at = now() + (substr(step_id, 2)::int - 1) * interval '300 milliseconds'`); err != nil {
		t.Fatal(err)
	}
	metrics := NewMetrics(prometheus.NewRegistry(), "test")
	startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"p": p}, sagaRoutes()...), Config{Workers: 4, Metrics: metrics, SagaInterval: 100 * time.Millisecond})
	testkit.WaitFor(t, 15*time.Second, "saga done", func() (bool, string) { return sagaState(t, pool, "bad") == outbox.SagaDone, "" })

	for k, want := range map[string]outbox.Status{"bad1": outbox.StatusCompensated, "bad2": outbox.StatusCompensated, "bad3": outbox.StatusFailed,
		"good1": outbox.StatusSucceeded, "good2": outbox.StatusSucceeded, "good3": outbox.StatusSucceeded} {
		if got := getRow(t, pool, keys[k]).Status; got != want {
			t.Errorf("%s: status %s, want %s", k, got, want)
		}
	}
	var comps []string
	for _, c := range p.tools() {
		if c == "bad/s2/release_stock" || c == "bad/s1/refund_card" {
			comps = append(comps, c)
		}
	}
	if fmt.Sprint(comps) != "[bad/s2/release_stock bad/s1/refund_card]" {
		t.Fatalf("compensations %v, want release_stock then refund_card, once each", comps)
	}
	if p.count("cancel_shipment") != 0 {
		t.Fatal("the failed step itself must not be compensated")
	}
	// The compensation carries the forward payload and response.
	var payload []byte
	if err := pool.QueryRow(t.Context(), "SELECT payload FROM drainer.outbox WHERE kind = 'compensation' AND tool_name = 'refund_card'").Scan(&payload); err != nil {
		t.Fatal(err)
	}
	var cp struct {
		ForwardKey      string          `json:"forward_key"`
		ForwardPayload  json.RawMessage `json:"forward_payload"`
		ForwardResponse json.RawMessage `json:"forward_response"`
	}
	if err := json.Unmarshal(payload, &cp); err != nil || cp.ForwardKey != keys["bad1"] || string(cp.ForwardPayload) != `{"step": "s1"}` ||
		string(cp.ForwardResponse) != `{"id": "`+keys["bad1"]+`"}` {
		t.Fatalf("compensation payload %s (%v)", payload, err)
	}
	if v := testutil.ToFloat64(metrics.CompensationsTotal.WithLabelValues("succeeded")); v != 2 {
		t.Fatalf("drainer_compensations_total{succeeded} = %v", v)
	}
}

// TestAbortRun: the agent aborts a run with two succeeded steps and one
// never-attempted step: the latter is cancelled and never dispatched; the
// succeeded steps are compensated in reverse order.
func TestAbortRun(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	p := &recorder{}
	k1 := enqueueStep(t, pool, "run", "s1", "charge_card")
	k2 := enqueueStep(t, pool, "run", "s2", "reserve_stock")
	startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"p": p}, sagaRoutes()...), Config{Workers: 2, SagaInterval: 100 * time.Millisecond})
	testkit.WaitFor(t, 10*time.Second, "steps succeeded", func() (bool, string) { return countByStatus(t, pool)["succeeded"] == 2, "" })
	// Step 3 is enqueued not yet due, in one transaction, so no claim sees it due.
	var k3 string
	err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(t.Context(), `SELECT key FROM drainer.enqueue('run', 's3', 'ship_order', 'order:1', '{}')`).Scan(&k3); err != nil {
			return err
		}
		_, err := tx.Exec(t.Context(), "UPDATE drainer.outbox SET next_attempt_at = now() + interval '1 hour' WHERE key = $1", k3)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var cancelled int
	if err := pool.QueryRow(t.Context(), "SELECT drainer.abort_run('run', 'tool returned a wrong result')").Scan(&cancelled); err != nil || cancelled != 1 {
		t.Fatalf("abort_run: cancelled %d, %v", cancelled, err)
	}
	testkit.WaitFor(t, 10*time.Second, "saga done", func() (bool, string) { return sagaState(t, pool, "run") == outbox.SagaDone, "" })
	if s := getRow(t, pool, k3); s.Status != outbox.StatusCancelled || s.Attempts != 0 {
		t.Fatalf("never-attempted step: %+v", s)
	}
	if getRow(t, pool, k1).Status != outbox.StatusCompensated || getRow(t, pool, k2).Status != outbox.StatusCompensated {
		t.Fatal("succeeded steps not compensated")
	}
	calls := p.tools()
	if len(calls) != 4 || fmt.Sprint(calls[2:]) != "[run/s2/release_stock run/s1/refund_card]" {
		t.Fatalf("calls %v: want the two forward steps, then release_stock, then refund_card, and no ship_order", calls)
	}
}

// TestCompensationFailedHaltsAndAlertsOnce: a compensation that always fails
// ends compensation_failed, halts the saga (the earlier step is not
// compensated out of order), counts, and notifies the alert adapter exactly once.
func TestCompensationFailedHaltsAndAlertsOnce(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	p := &recorder{fn: func(m *dispatch.Message) dispatch.Result {
		switch m.Tuple.ToolName {
		case "release_stock":
			return dispatch.Result{Outcome: dispatch.Retry, Status: 503, Err: errors.New("http 503")}
		case "ship_order":
			return dispatch.Result{Outcome: dispatch.Terminal, Status: 422, Err: errors.New("http 422")}
		}
		return dispatch.Result{Outcome: dispatch.Success}
	}}
	pager := &recorder{}
	k1 := enqueueStep(t, pool, "run", "s1", "charge_card")
	k2 := enqueueStep(t, pool, "run", "s2", "reserve_stock")
	enqueueStep(t, pool, "run", "s3", "ship_order")
	if _, err := pool.Exec(t.Context(), `UPDATE drainer.outbox SET next_attempt_at = now() + (substr(step_id, 2)::int - 1) * interval '300 milliseconds'`); err != nil {
		t.Fatal(err)
	}
	rt := testRouting(t, map[string]dispatch.Adapter{"p": p, "pager": pager}, sagaRoutes()...)
	rt.CompensationFailedAlert = "pager"
	rt.Routes[outbox.AlertTool] = &Route{Tool: outbox.AlertTool, Adapter: "pager", Class: "key_idempotent", MaxAttempts: 5,
		Backoff: Backoff{Base: 10 * time.Millisecond, Cap: 50 * time.Millisecond}}
	metrics := NewMetrics(prometheus.NewRegistry(), "test")
	var logs testkit.Buffer
	startEngine(t, pool, rt, Config{Workers: 4, Metrics: metrics, SagaInterval: 100 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	testkit.WaitFor(t, 15*time.Second, "saga halted", func() (bool, string) { return sagaState(t, pool, "run") == outbox.SagaHalted, "" })
	testkit.WaitFor(t, 10*time.Second, "alert sent", func() (bool, string) { return pager.count(outbox.AlertTool) >= 1, "" })
	// Sweeps go on (the halted saga is not theirs to advance) and change
	// nothing: what a sweep queued is committed with it, so after three
	// sweeps the rows show whether one queued a compensation or an alert.
	for i := range 3 {
		sagaSwept(t, pool, fmt.Sprintf("probe-%d", i))
		if c := compensationRows(t, pool, "run"); fmt.Sprint(c) != "[release_stock/compensation_failed]" {
			t.Fatalf("after sweep %d, the halted run's compensations are %v; want only release_stock, compensation_failed", i+1, c)
		}
		var alerts int
		if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM drainer.outbox WHERE tool_name = $1", outbox.AlertTool).Scan(&alerts); err != nil || alerts != 1 {
			t.Fatalf("after sweep %d, %d alert rows (%v); want exactly one", i+1, alerts, err)
		}
	}
	if n := pager.count(outbox.AlertTool); n != 1 {
		t.Fatalf("alert sent %d times, want exactly once", n)
	}
	if n := p.count("release_stock"); n != 3 {
		t.Fatalf("failing compensation tried %d times, want max_attempts 3 (never a loop)", n)
	}
	if p.count("refund_card") != 0 || getRow(t, pool, k1).Status != outbox.StatusSucceeded {
		t.Fatal("the saga must halt: step 1 compensated out of order")
	}
	if getRow(t, pool, k2).Status != outbox.StatusSucceeded {
		t.Fatal("the forward row of a failed compensation stays succeeded")
	}
	if v := testutil.ToFloat64(metrics.CompensationFailedTotal); v != 1 {
		t.Fatalf("drainer_compensation_failed_total = %v", v)
	}
	var alert []byte
	if err := pool.QueryRow(t.Context(), "SELECT payload FROM drainer.outbox WHERE tool_name = $1", outbox.AlertTool).Scan(&alert); err != nil {
		t.Fatal(err)
	}
	// The ERROR line names the row a human must look at.
	var failedKey string
	if err := pool.QueryRow(t.Context(), "SELECT key FROM drainer.outbox WHERE tool_name = 'release_stock'").Scan(&failedKey); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(`"level":"ERROR","msg":"compensation failed: a human must act (drainer resolve); alert queued","key":%q,"agent_run_id":"run","tool_name":"release_stock"`, failedKey); !strings.Contains(logs.String(), want) {
		t.Errorf("no ERROR line naming the failed compensation; want %s in:\n%s", want, logs.String())
	}
	var a map[string]any
	if err := json.Unmarshal(alert, &a); err != nil || a["event"] != "compensation_failed" || a["agent_run_id"] != "run" || a["tool_name"] != "release_stock" {
		t.Fatalf("alert payload %s", alert)
	}
}

// TestTwoReplicasManyFailingRuns: two engines, 200 runs failing at once: every
// compensation happens exactly once, none missing.
func TestTwoReplicasManyFailingRuns(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	p := &recorder{fn: func(m *dispatch.Message) dispatch.Result {
		if m.Tuple.ToolName == "ship_order" {
			return dispatch.Result{Outcome: dispatch.Terminal, Status: 422, Err: errors.New("http 422")}
		}
		return dispatch.Result{Outcome: dispatch.Success}
	}}
	const runs = 200
	for i := range runs {
		run := "run-" + itoa(i)
		enqueueStep(t, pool, run, "s1", "charge_card")
		enqueueStep(t, pool, run, "s2", "reserve_stock")
	}
	waitDrained := func() bool { return countByStatus(t, pool)["succeeded"] == 2*runs }
	e1 := startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"p": p}, sagaRoutes()...), Config{Workers: 8, ReplicaID: "a", SagaInterval: 50 * time.Millisecond})
	startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"p": p}, sagaRoutes()...), Config{Workers: 8, ReplicaID: "b", SagaInterval: 50 * time.Millisecond})
	_ = e1
	testkit.WaitFor(t, 20*time.Second, "forward steps succeeded", func() (bool, string) { return waitDrained(), "" })
	for i := range runs {
		enqueueStep(t, pool, "run-"+itoa(i), "s3", "ship_order")
	}
	testkit.WaitFor(t, 60*time.Second, "all sagas done", func() (bool, string) {
		var open int
		if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM drainer.runs WHERE saga_state <> 'done'").Scan(&open); err != nil {
			t.Fatal(err)
		}
		return open == 0 && countByStatus(t, pool)["compensated"] == 2*runs, ""
	})
	seen := map[string]int{}
	p.mu.Lock()
	for _, c := range p.calls {
		if c.Kind == "compensation" {
			seen[c.Key]++
		}
	}
	p.mu.Unlock()
	if len(seen) != 2*runs {
		t.Fatalf("%d distinct compensations, want %d", len(seen), 2*runs)
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("compensation %s dispatched %d times", k, n)
		}
	}
}

// TestSagaCancelsRowsThatRacedTheAbort: a never-attempted row left pending in
// an aborted run (its enqueue raced the abort) is cancelled by the saga.
func TestSagaCancelsRowsThatRacedTheAbort(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	ctx := t.Context()
	k := enqueueStep(t, pool, "raced", "s1", "charge_card")
	// The state a race leaves: the run aborted, the row still pending.
	if _, err := pool.Exec(ctx, "INSERT INTO drainer.runs (agent_run_id, abort_reason, aborted_by) VALUES ('raced', 'agent gave up', 'agent:app')"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "UPDATE drainer.outbox SET next_attempt_at = now() + interval '1 hour' WHERE key = $1", k); err != nil {
		t.Fatal(err)
	}
	if state, err := testStore.AdvanceSaga(ctx, pool, "raced", compensations.Map{}); err != nil || state != outbox.SagaDone {
		t.Fatalf("advance: %s %v", state, err)
	}
	if r := getRow(t, pool, k); r.Status != outbox.StatusCancelled || !strings.Contains(deref(r.LastError), "agent gave up") {
		t.Fatalf("raced row: %+v %s", r, deref(r.LastError))
	}
}
