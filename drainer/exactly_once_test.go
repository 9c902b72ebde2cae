package drainer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
)

// TestParkedStepHoldsItsSaga: step 2 of a run (non_idempotent) parks as
// outcome_unknown, step 3 fails. The saga waits for the parked step (its
// effect may exist) instead of compensating step 1 around it, and says why;
// once an operator resolves step 2 as succeeded, the compensations run in
// reverse order: step 2's, then step 1's (docs/reference.md §6). Before the
// fix, step 1 was refunded at once and step 2's compensation ran last.
func TestParkedStepHoldsItsSaga(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	p := &recorder{fn: func(m *dispatch.Message) dispatch.Result {
		switch m.Tuple.ToolName {
		case "book_flight":
			return dispatch.Result{Outcome: dispatch.Ambiguous, Err: errors.New("connection reset after the request was sent")}
		case "ship_order":
			return dispatch.Result{Outcome: dispatch.Terminal, Status: 422, Err: errors.New("http 422: address refused")}
		}
		return dispatch.Result{Outcome: dispatch.Success}
	}}
	k1 := enqueueStep(t, pool, "run", "s1", "charge_card")
	k2 := enqueueStep(t, pool, "run", "s2", "book_flight")
	k3 := enqueueStep(t, pool, "run", "s3", "ship_order")
	if _, err := pool.Exec(t.Context(), `UPDATE drainer.outbox SET next_attempt_at = now() + (substr(step_id, 2)::int - 1) * interval '300 milliseconds'`); err != nil {
		t.Fatal(err)
	}
	routes := append(sagaRoutes(),
		&Route{Tool: "book_flight", Adapter: "p", Class: outbox.ClassNonIdempotent, Compensation: "cancel_flight"},
		&Route{Tool: "cancel_flight", Adapter: "p", MaxAttempts: 3})
	startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"p": p}, routes...), Config{Workers: 2, SagaInterval: 50 * time.Millisecond})

	testkit.WaitFor(t, 15*time.Second, "step 3 failed and step 2 parked", func() (bool, string) {
		return getRow(t, pool, k3).Status == outbox.StatusFailed && getRow(t, pool, k2).Status == outbox.StatusOutcomeUnknown, ""
	})
	testkit.WaitFor(t, 10*time.Second, "the saga to wait, naming the parked step", func() (bool, string) {
		var note *string
		if err := pool.QueryRow(t.Context(), `SELECT saga_note FROM drainer.runs WHERE agent_run_id = 'run'`).Scan(&note); err != nil {
			t.Fatal(err)
		}
		return sagaState(t, pool, "run") == outbox.SagaWaiting && note != nil && strings.Contains(*note, k2), ""
	})
	// Sweeps later, still nothing compensated: each sweep advanced the
	// waiting saga and committed what it queued before the probe it
	// finished is seen done.
	for i := range 5 {
		sagaSwept(t, pool, fmt.Sprintf("probe-%d", i))
		if c := compensationRows(t, pool, "run"); len(c) != 0 || getRow(t, pool, k1).Status != outbox.StatusSucceeded {
			t.Fatalf("after sweep %d, compensations %v queued while step 2 was parked (step 1 %s)", i+1, c, getRow(t, pool, k1).Status)
		}
		if s := sagaState(t, pool, "run"); s != outbox.SagaWaiting {
			t.Fatalf("after sweep %d, the saga is %s; want it waiting for the parked step", i+1, s)
		}
	}
	if n := p.count("refund_card") + p.count("cancel_flight"); n != 0 {
		t.Fatalf("%d compensations ran while step 2 was parked", n)
	}

	// The operator resolves the parked step: it happened.
	if _, err := pool.Exec(t.Context(), `UPDATE drainer.outbox SET status = 'succeeded', updated_at = now() WHERE key = $1`, k2); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 15*time.Second, "saga done", func() (bool, string) { return sagaState(t, pool, "run") == outbox.SagaDone, "" })
	var comps []string
	for _, c := range p.tools() {
		if strings.HasSuffix(c, "/refund_card") || strings.HasSuffix(c, "/cancel_flight") {
			comps = append(comps, c)
		}
	}
	if fmt.Sprint(comps) != "[run/s2/cancel_flight run/s1/refund_card]" {
		t.Fatalf("compensations %v, want step 2's then step 1's", comps)
	}
	if getRow(t, pool, k1).Status != outbox.StatusCompensated || getRow(t, pool, k2).Status != outbox.StatusCompensated {
		t.Fatal("steps 1 and 2 not compensated")
	}
}

// TestRequeuePastTheKeyWindowIsStoppedByTheGuard: a failed row whose first
// attempt is older than its key's window, requeued by an operator (attempts
// back to 0, first_attempt_at kept), is failed again by the key-TTL guard
// without a request. Before, the guard looked only at rows with attempts > 1
// and the requeued row was sent.
func TestRequeuePastTheKeyWindowIsStoppedByTheGuard(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	p := &recorder{}
	key := storetest.Insert(t, pool, storetest.Row{ToolName: "charge_card", Status: outbox.StatusFailed, Attempts: 3})
	// What `drainer requeue` of a failed row does (ops: store.Requeue).
	if _, err := pool.Exec(t.Context(), `UPDATE drainer.outbox SET status = 'pending', attempts = 0, next_attempt_at = now(),
	        first_attempt_at = now() - interval '2 hours' WHERE key = $1`, key); err != nil {
		t.Fatal(err)
	}
	rt := testRouting(t, map[string]dispatch.Adapter{"p": p}, &Route{Tool: "charge_card", Adapter: "p", KeyTTL: time.Hour})
	startEngine(t, pool, rt, Config{Workers: 2})
	testkit.WaitFor(t, 10*time.Second, "the requeued row failed by the guard", func() (bool, string) {
		return getRow(t, pool, key).Status == outbox.StatusFailed, ""
	})
	if r := getRow(t, pool, key); r.LastError == nil || !strings.Contains(*r.LastError, "key TTL guard") {
		t.Fatalf("last_error %v, want the key TTL guard", r.LastError)
	}
	if n := p.count("charge_card"); n != 0 {
		t.Fatalf("%d requests past the key's window", n)
	}
}

// TestEnqueueBehindAnAbortIsNeverSent: a producer at REPEATABLE READ or
// SERIALIZABLE takes its snapshot, the agent's abort of the run commits, and
// the producer then enqueues into the run and commits. The row is created
// (its snapshot cannot see the abort) but cancelled at its claim and never
// sent; before, it was dispatched and succeeded.
func TestEnqueueBehindAnAbortIsNeverSent(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	p := &recorder{}
	startEngine(t, pool, testRouting(t, map[string]dispatch.Adapter{"p": p}, sagaRoutes()...), Config{Workers: 2, SagaInterval: 50 * time.Millisecond})
	for _, level := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		run := "run-" + strings.ReplaceAll(string(level), " ", "-")
		ctx := context.Background()
		tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: level})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `SELECT count(*) FROM drainer.runs`); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `SELECT drainer.abort_run($1, 'the agent gave up')`, run); err != nil {
			t.Fatal(err)
		}
		var key string
		if err := tx.QueryRow(ctx, `SELECT key FROM drainer.enqueue($1, 's1', 'send_email', '', '{}')`, run).Scan(&key); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("%s: %v", level, err)
		}
		testkit.WaitFor(t, 10*time.Second, "the row cancelled", func() (bool, string) { return getRow(t, pool, key).Status == outbox.StatusCancelled, "" })
		if r := getRow(t, pool, key); r.Attempts != 0 {
			t.Fatalf("%s: cancelled row has attempts %d, want 0", level, r.Attempts)
		}
	}
	if n := p.count("send_email"); n != 0 {
		t.Fatalf("%d requests for rows of aborted runs", n)
	}
}
