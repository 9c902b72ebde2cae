package ops

import (
	"errors"
	"fmt"
	"github.com/drainer-io/drainer/outbox"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/compensations"
	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5"
)

func TestRequeueRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := e.enqueue("r1", "charge", 5)
	cases := map[outbox.Status]string{
		"succeeded":           "the effect happened; requeueing would repeat it",
		"compensated":         "undone by the saga",
		"in_flight":           "holds its lease until",
		"outcome_unknown":     "drainer resolve",
		"compensation_failed": "drainer resolve",
	}
	i := 0
	for status, why := range cases {
		key := k[i]
		i++
		e.set(key, status, 1)
		_, err := e.c.Requeue(t.Context(), key, alice, BulkOptions{})
		te := wantRefused(t, err, key, status)
		if !strings.Contains(te.Why, why) {
			t.Errorf("%s: why = %q, want it to mention %q", status, te.Why, why)
		}
		if !strings.HasPrefix(err.Error(), "cannot requeue "+key+": it is "+string(status)+" (") {
			t.Errorf("message = %q", err)
		}
		if got := e.status(key); got != string(status) {
			t.Errorf("%s: status became %s", status, got)
		}
	}

	// A pruned key answers its final status.
	e.exec(`UPDATE drainer.keys k SET final_status = 'succeeded', pruned_at = now() FROM drainer.outbox o WHERE o.key = k.key AND k.key = $1`, k[0])
	e.exec(`DELETE FROM drainer.outbox WHERE key = $1`, k[0])
	_, err := e.c.Requeue(t.Context(), k[0], alice, BulkOptions{})
	if te := wantRefused(t, err, k[0], "succeeded"); !strings.Contains(te.Why, "pruned") {
		t.Errorf("pruned: why = %q", te.Why)
	}

	_, err = e.c.Requeue(t.Context(), "idem_v1_unknown", alice, BulkOptions{})
	var nf *NotFoundError
	if !errors.As(err, &nf) {
		t.Fatalf("unknown key: err = %v", err)
	}
	if _, err := e.c.Requeue(t.Context(), k[4], Who{}, BulkOptions{}); !errors.Is(err, ErrNoActor) {
		t.Fatalf("no actor: err = %v", err)
	}
	if _, err := e.c.RequeueWhere(t.Context(), Filter{Status: "succeeded"}, alice, BulkOptions{}); err == nil ||
		!strings.Contains(err.Error(), "would repeat it") {
		t.Fatalf("bulk requeue of succeeded rows: err = %v", err)
	}
}

// TestRequeueRefusedOnceACompensationWasPruned: a run whose saga
// compensated a step and ended, and whose compensation row and compensated
// row were then pruned, is not revived by a requeue of its failed row: its
// saga did run, though no row of it is left to say so. Before, the revival
// looked for those rows only, revived the run, and the failed step ran
// again after its sibling's effect had been undone (found by the model
// test: "not aborted, yet 1 compensations were applied").
func TestRequeueRefusedOnceACompensationWasPruned(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := e.enqueue("saga", "charge", 2)
	e.set(k[0], "succeeded", 1)
	e.set(k[1], "failed", 3)
	m := compensations.NewMap(map[string]string{"charge": "refund"})
	if st, err := store.MustNew("drainer").AdvanceSaga(t.Context(), e.pool, "saga", m); err != nil || st != "compensating" {
		t.Fatalf("advance = %q, %v", st, err)
	}
	e.exec(`UPDATE drainer.outbox SET status = 'succeeded', attempts = 1 WHERE agent_run_id = 'saga' AND kind = 'compensation'`)
	e.set(k[0], "compensated", 1)
	e.exec(`UPDATE drainer.runs SET saga_state = 'done' WHERE agent_run_id = 'saga'`)
	e.exec(`SELECT drainer.prune_rows(s, now() + interval '1 second', 100, '{}', '{}') FROM unnest(ARRAY['succeeded', 'compensated']) s`)
	if n := e.count(`SELECT count(*) FROM drainer.outbox WHERE agent_run_id = 'saga'`); n != 1 {
		t.Fatalf("setup: %d rows of the run left, want the failed one", n)
	}
	_, err := e.c.Requeue(t.Context(), k[1], alice, BulkOptions{})
	if te := wantRefused(t, err, k[1], "failed"); !strings.Contains(te.Why, "saga") {
		t.Fatalf("why = %q, want the saga named", te.Why)
	}
	if !e.aborted("saga") {
		t.Fatal("the run was revived")
	}
}

// TestExpiredLeaseRefusalSaysSo: an in_flight row whose lease expired (its
// replica died) is refused as in flight, saying the lease expired and a
// reclaimer takes it back, not that a worker holds it until a time already
// past.
func TestExpiredLeaseRefusalSaysSo(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := e.enqueue("r1", "charge", 1)
	e.set(k[0], outbox.StatusInFlight, 1)
	e.exec(`UPDATE drainer.outbox SET lease_expires_at = now() - interval '20 seconds' WHERE key = $1`, k[0])
	_, err := e.c.Cancel(t.Context(), k[0], Who{Actor: "alice", Reason: "stop"}, false)
	te := wantRefused(t, err, k[0], outbox.StatusInFlight)
	if !strings.Contains(te.Why, "its lease expired at") || !strings.Contains(te.Why, "reclaimer") || strings.Contains(te.Why, "holds its lease until") {
		t.Fatalf("why = %q, want the expired lease and the reclaimer", te.Why)
	}
}

func TestRequeuePendingAndCancelled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := e.enqueue("r1", "charge", 2)
	e.exec(`UPDATE drainer.outbox SET attempts = 2, next_attempt_at = now() + interval '1 hour' WHERE key = $1`, k[0])

	res, err := e.c.Requeue(t.Context(), k[0], alice, BulkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := e.row(k[0]); r.Status != "pending" || r.Attempts != 2 || !r.DueNow {
		t.Fatalf("pending row after requeue = %+v, want pending, attempts 2, due now", r)
	}
	if res.Count != 1 || res.Rows[0].FromAttempts != 2 || res.Rows[0].Attempts != 2 {
		t.Fatalf("result = %+v", res)
	}
	// No status changed, so the action is appended to the key's chain.
	if a := e.lastAudit(k[0]); a.Event != "operator:requeue" || a.Actor != "alice" || *a.Reason != alice.Reason {
		t.Fatalf("audit = %+v", a)
	}

	// A cancelled row of a run that is not aborted may come back.
	if _, err := e.c.Cancel(t.Context(), k[1], alice, false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Requeue(t.Context(), k[1], alice, BulkOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := e.status(k[1]); got != "pending" {
		t.Fatalf("un-cancelled row is %s", got)
	}
}

func TestRequeueFailedRevivesRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := e.enqueue("r1", "charge", 4)
	e.set(k[0], "succeeded", 1)
	e.set(k[1], "pending", 2) // attempted: left alone by the abort
	e.set(k[2], "failed", 12) // aborts r1; k[3] is cancelled
	if !e.aborted("r1") || e.status(k[3]) != "cancelled" {
		t.Fatal("setup: the failure did not abort r1")
	}

	// The cancelled sibling cannot come back on its own.
	_, err := e.c.Requeue(t.Context(), k[3], alice, BulkOptions{})
	if te := wantRefused(t, err, k[3], "cancelled"); !strings.Contains(te.Why, k[2]) {
		t.Fatalf("why = %q, want it to name the failed row", te.Why)
	}

	// A dry run says what would happen and does nothing.
	res, err := e.c.Requeue(t.Context(), k[2], alice, BulkOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Revived) != 1 || len(res.Revived[0].Restored) != 1 || res.Revived[0].Restored[0] != k[3] {
		t.Fatalf("dry run = %+v", res)
	}
	if e.status(k[2]) != "failed" || !e.aborted("r1") {
		t.Fatal("dry run changed something")
	}

	res, err = e.c.Requeue(t.Context(), k[2], alice, BulkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := e.row(k[2]); r.Status != "pending" || r.Attempts != 0 || !r.DueNow {
		t.Fatalf("requeued row = %+v, want pending with a fresh budget", r)
	}
	if e.aborted("r1") {
		t.Fatal("r1 is still aborted")
	}
	if r := e.row(k[3]); r.Status != "pending" || r.LastError != nil {
		t.Fatalf("restored row = %+v", r)
	}
	if e.status(k[0]) != "succeeded" || e.row(k[1]).Attempts != 2 {
		t.Fatal("revival touched rows it should not")
	}
	if len(res.Revived) != 1 || res.Revived[0].AgentRunID != "r1" || len(res.Revived[0].Restored) != 1 {
		t.Fatalf("result = %+v", res)
	}
	if a := e.lastAudit(k[2]); a.Event != "operator:requeue" || a.Actor != "alice" || *a.From != "failed" || *a.To != "pending" {
		t.Fatalf("audit of the requeued row = %+v", a)
	}
	if a := e.lastAudit("run:r1"); a.Event != "operator:revive" || a.Actor != "alice" || !strings.Contains(*a.Reason, "step s2 (charge) failed") {
		t.Fatalf("audit of the run = %+v", a)
	}
}

func TestRequeueFailedRefusedInAbortedRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)

	// The saga has started: a compensation row exists.
	k := e.enqueue("saga", "charge", 2)
	e.set(k[0], "succeeded", 1)
	e.set(k[1], "failed", 3)
	m := compensations.NewMap(map[string]string{"charge": "refund"})
	if st, err := store.MustNew("drainer").AdvanceSaga(t.Context(), e.pool, "saga", m); err != nil || st != "compensating" {
		t.Fatalf("advance = %q, %v", st, err)
	}
	_, err := e.c.Requeue(t.Context(), k[1], alice, BulkOptions{})
	if te := wantRefused(t, err, k[1], "failed"); !strings.Contains(te.Why, "saga has started") {
		t.Fatalf("why = %q", te.Why)
	}

	// An operator aborted the run.
	o := e.enqueue("op", "charge", 1)
	if _, err := e.c.Abort(t.Context(), "op", Who{Actor: "bob", Reason: "wrong customer"}); err != nil {
		t.Fatal(err)
	}
	e.set(o[0], "failed", 1)
	_, err = e.c.Requeue(t.Context(), o[0], alice, BulkOptions{})
	if te := wantRefused(t, err, o[0], "failed"); !strings.Contains(te.Why, "aborted by bob") {
		t.Fatalf("why = %q", te.Why)
	}

	// Two failed rows: one alone cannot revive the run.
	two := e.enqueue("two", "charge", 2)
	e.set(two[0], "failed", 1)
	e.set(two[1], "failed", 1)
	_, err = e.c.Requeue(t.Context(), two[0], alice, BulkOptions{})
	if te := wantRefused(t, err, two[0], "failed"); !strings.Contains(te.Why, two[1]) {
		t.Fatalf("why = %q", te.Why)
	}
	// Together they can.
	res, err := e.c.RequeueWhere(t.Context(), Filter{Status: "failed", Run: "two"}, alice, BulkOptions{})
	if err != nil || res.Count != 2 || res.RefusedCount != 0 || len(res.Revived) != 1 {
		t.Fatalf("bulk = %+v, %v", res, err)
	}
	if e.aborted("two") {
		t.Fatal("run two still aborted")
	}
	for _, key := range append(k, o...) {
		if e.status(key) == "pending" {
			t.Fatalf("%s was requeued", key)
		}
	}
}

func TestRequeueDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i := range 3 {
		k := e.enqueue(fmt.Sprintf("r%d", i), "charge", 2)
		e.set(k[0], "failed", 5)
	}
	ok := e.enqueue("fine", "charge", 1)
	e.set(ok[0], "succeeded", 1)
	snapshot := func() string {
		var s string
		if err := e.pool.QueryRow(t.Context(), `SELECT (SELECT string_agg(key || status || attempts || next_attempt_at, ',' ORDER BY seq) FROM drainer.outbox)
		    || (SELECT count(*) FROM drainer.audit) || (SELECT count(*) FROM drainer.runs)`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := snapshot()
	res, err := e.c.RequeueWhere(t.Context(), Filter{Status: "failed"}, alice, BulkOptions{DryRun: true, Show: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !res.DryRun || res.Count != 3 || len(res.Rows) != 2 || len(res.Revived) != 3 || res.Revived[0].Restored[0] == "" {
		t.Fatalf("dry run = %+v", res)
	}
	if res.Rows[0].FromStatus != "failed" || res.Rows[0].Status != "pending" || res.Rows[0].Attempts != 0 {
		t.Fatalf("dry-run row = %+v", res.Rows[0])
	}
	if after := snapshot(); after != before {
		t.Fatalf("dry run changed the database:\n%s\n%s", before, after)
	}
}

func TestRequeueBulkInBatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// 2,500 failed rows in runs of 7: batch boundaries cut runs, whose
	// failed rows must still be requeued together.
	const n, per = 2500, 7
	for r := 0; r*per < n; r++ {
		e.enqueue(fmt.Sprintf("run-%03d", r), "charge", min(per, n-r*per))
	}
	// One statement on the queue: every row fails before the failures'
	// triggers abort their runs (through the outbox view each row's
	// trigger would run before the next row is written).
	e.exec(`UPDATE drainer.queue SET status = 'failed', attempts = 12`)
	runs := e.count(`SELECT count(*) FROM drainer.runs`)
	if runs != (n+per-1)/per {
		t.Fatalf("setup: %d aborted runs", runs)
	}

	res, err := e.c.RequeueWhere(t.Context(), Filter{Status: "failed"}, alice, BulkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Count != n || res.RefusedCount != 0 || len(res.Revived) != runs || res.Batches < 3 || len(res.Rows) != DefaultShow {
		t.Fatalf("result: count %d refused %d revived %d batches %d rows %d", res.Count, res.RefusedCount, len(res.Revived), res.Batches, len(res.Rows))
	}
	if got := e.count(`SELECT count(*) FROM drainer.outbox WHERE status = 'pending' AND attempts = 0 AND next_attempt_at <= now()`); got != n {
		t.Fatalf("%d rows pending with a fresh budget, want %d", got, n)
	}
	if got := e.count(`SELECT count(*) FROM drainer.runs`); got != 0 {
		t.Fatalf("%d runs still aborted", got)
	}
	if got := e.count(`SELECT count(*) FROM drainer.audit WHERE event = 'operator:requeue' AND actor = 'alice'`); got != n {
		t.Fatalf("%d audit entries, want %d", got, n)
	}
}

func TestRequeueRaceIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := e.enqueue("r1", "charge", 1)
	e.set(k[0], "failed", 3)
	e.exec(`DELETE FROM drainer.runs`)
	// The plan read "failed"; the row changed before the update.
	r := candidate{Key: k[0], AgentRunID: "r1", Status: "failed", Kind: "forward", Attempts: 3}
	p := &plan{changes: []Change{requeuer{c: e.c, who: alice}.change(r)}}
	e.set(k[0], "succeeded", 3)
	err := e.c.begin(t.Context(), "requeue", alice, func(tx pgx.Tx) error {
		return requeuer{c: e.c, who: alice}.apply(t.Context(), tx, p)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.changes) != 0 || len(p.refused) != 1 || p.refused[0].Status != "succeeded" {
		t.Fatalf("plan after apply = %+v", p)
	}
	if !strings.Contains(p.refused[0].Error(), "changed while this command ran") || e.status(k[0]) != "succeeded" {
		t.Fatalf("refusal = %v, status %s", p.refused[0], e.status(k[0]))
	}
}

// TestRequeueKeepsRetryAfterFloor: a requeued row waits for the moment its
// provider's Retry-After allowed, and says so; --ignore-retry-after makes it
// due now and says which floor it overrode.
func TestRequeueKeepsRetryAfterFloor(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := e.enqueue("r1", "charge", 2)
	e.exec(`UPDATE drainer.outbox SET not_before = now() + interval '1 hour', next_attempt_at = now() + interval '1 hour'`)
	due := func(key string) int {
		return e.count(`SELECT (extract(epoch FROM next_attempt_at - now()) / 60)::int FROM drainer.outbox WHERE key = $1`, key)
	}
	res, err := e.c.Requeue(t.Context(), k[0], alice, BulkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ch := res.Rows[0]; ch.NotBefore == nil || !strings.Contains(ch.Warning, "--ignore-retry-after") {
		t.Fatalf("change = %+v; want the floor named", ch)
	}
	if m := due(k[0]); m < 59 {
		t.Fatalf("requeue moved the row to %d minutes from now, before its Retry-After floor", m)
	}
	res, err = e.c.Requeue(t.Context(), k[1], alice, BulkOptions{IgnoreRetryAfter: true})
	if err != nil {
		t.Fatal(err)
	}
	if ch := res.Rows[0]; ch.NotBefore != nil || !strings.Contains(ch.Warning, "overrides") {
		t.Fatalf("change = %+v; want the override said", ch)
	}
	if m := due(k[1]); m > 0 {
		t.Fatalf("with --ignore-retry-after the row is still %d minutes away", m)
	}
}

// An agent that aborts a run which a row failure aborted already is
// remembered: requeueing the failed row no longer revives the run and sends
// a step the agent gave up on (before, its abort answered 0, left no trace,
// and the requeue revived the run).
func TestRequeueRefusedAfterTheAgentsOwnAbort(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := e.enqueue("r", "charge", 2)
	e.set(k[0], "failed", 1) // aborts r (by drainer); k[1] is cancelled
	if !e.aborted("r") || e.status(k[1]) != "cancelled" {
		t.Fatal("setup: the failure did not abort r")
	}
	e.exec(`SELECT drainer.abort_run('r', 'the agent gave up on the order')`)
	_, err := e.c.Requeue(t.Context(), k[0], alice, BulkOptions{})
	if te := wantRefused(t, err, k[0], "failed"); !strings.Contains(te.Why, "asked for its abort") {
		t.Fatalf("why = %q", te.Why)
	}
	if !e.aborted("r") || e.status(k[1]) != "cancelled" {
		t.Fatal("the refused requeue revived the run")
	}
	if a := e.lastAudit("run:r"); a.Event != "agent:abort" || a.Reason == nil || *a.Reason != "the agent gave up on the order" {
		t.Fatalf("the agent's abort is not on the run's chain: %+v", a)
	}
}

// TestRequeueRefusedWhenItsRunWasAbortedAgain: a batch planned while its
// failed row's run was not aborted (another operator had just revived it)
// and applied once that row failed again and aborted the run anew refuses
// the row, naming why, instead of requeueing it into an aborted run, where
// its claim would cancel it unsent while the output counted it requeued.
func TestRequeueRefusedWhenItsRunWasAbortedAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := e.enqueue("r1", "charge", 1)
	e.set(k[0], "failed", 3) // aborts r1
	e.exec(`DELETE FROM drainer.runs`)
	// The plan read r1 not aborted (revived by another operator).
	r := candidate{Key: k[0], AgentRunID: "r1", Status: "failed", Kind: "forward", Attempts: 3}
	p := &plan{changes: []Change{requeuer{c: e.c, who: alice}.change(r)}}
	// The row went out again and failed again: r1 aborted anew.
	e.set(k[0], "pending", 0)
	e.set(k[0], "failed", 3)
	if !e.aborted("r1") {
		t.Fatal("setup: the second failure did not abort r1")
	}
	err := e.c.begin(t.Context(), "requeue", alice, func(tx pgx.Tx) error {
		return requeuer{c: e.c, who: alice}.apply(t.Context(), tx, p)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.changes) != 0 || len(p.refused) != 1 || !strings.Contains(p.refused[0].Error(), "was aborted again while this requeue ran") {
		t.Fatalf("plan after apply = %+v", p)
	}
	if e.status(k[0]) != "failed" || !e.aborted("r1") {
		t.Fatalf("row %s, r1 aborted %v; want it left failed in its aborted run", e.status(k[0]), e.aborted("r1"))
	}
}
