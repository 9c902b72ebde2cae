package ops

import (
	"errors"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/compensations"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
)

func TestResolveOutcomeUnknown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := e.enqueue("r1", "charge", 4)
	e.set(k[0], "outcome_unknown", 1)
	e.exec(`UPDATE drainer.outbox SET last_error = 'timeout after 10s: the request may have had its effect' WHERE key = $1`, k[0])

	if _, err := e.c.Resolve(t.Context(), k[0], Resolution{Note: "checked"}, alice); !errors.Is(err, ErrOutcomeRequired) {
		t.Fatalf("no outcome: err = %v", err)
	}
	if _, err := e.c.Resolve(t.Context(), k[0], Resolution{Outcome: "succeeded"}, alice); err == nil {
		t.Fatal("resolve without a note was accepted")
	}
	res, err := e.c.Resolve(t.Context(), k[0], Resolution{Note: "provider dashboard shows the charge", Outcome: "succeeded"}, alice)
	if err != nil {
		t.Fatal(err)
	}
	if r := e.row(k[0]); r.Status != "succeeded" || *r.Note != "provider dashboard shows the charge" || res.RunAborted {
		t.Fatalf("row = %+v, result %+v", r, res)
	}
	// The error that parked the row is stale: a succeeded row has none.
	if r := e.row(k[0]); r.LastError != nil {
		t.Fatalf("last_error of the row resolved succeeded = %q, want NULL", *r.LastError)
	}
	var resultError *string
	if err := e.pool.QueryRow(t.Context(), `SELECT last_error FROM drainer.result($1)`, k[0]).Scan(&resultError); err != nil || resultError != nil {
		t.Fatalf("drainer.result last_error = %v (%v), want NULL", resultError, err)
	}
	if a := e.lastAudit(k[0]); a.Event != "operator:resolve" || a.Actor != "alice" || *a.Reason != "provider dashboard shows the charge" {
		t.Fatalf("audit = %+v", a)
	}

	// Resolved as failed, a forward row aborts its run.
	e.set(k[1], "outcome_unknown", 1)
	e.exec(`UPDATE drainer.outbox SET last_error = 'connection reset after the request was sent' WHERE key = $1`, k[1])
	e.set(k[2], "pending", 2) // attempted: finishes first
	res, err = e.c.Resolve(t.Context(), k[1], Resolution{Note: "no charge at the provider", Outcome: "failed"}, alice)
	if err != nil {
		t.Fatal(err)
	}
	if !e.aborted("r1") || !res.RunAborted || res.Cancelled != 1 || res.Status != "failed" {
		t.Fatalf("result = %+v", res)
	}
	if e.status(k[3]) != "cancelled" || e.status(k[2]) != "pending" {
		t.Fatalf("siblings: %s %s", e.status(k[2]), e.status(k[3]))
	}
	if r := e.row(k[1]); !strings.Contains(*r.LastError, "resolved as failed by alice") || strings.Contains(*r.LastError, "connection reset") {
		t.Fatalf("last_error = %q", *r.LastError)
	}

	// Only parked rows can be resolved.
	_, err = e.c.Resolve(t.Context(), k[0], Resolution{Note: "x", Outcome: "failed"}, alice)
	wantRefused(t, err, k[0], "succeeded")
}

func TestResolveCompensationFailed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := e.enqueue("r1", "charge", 3)
	e.set(k[0], "succeeded", 1)
	e.set(k[1], "succeeded", 1)
	e.set(k[2], "failed", 3)
	m := compensations.NewMap(map[string]string{"charge": "refund"})
	if _, err := store.MustNew("drainer").AdvanceSaga(t.Context(), e.pool, "r1", m); err != nil {
		t.Fatal(err)
	}
	var comp string
	if err := e.pool.QueryRow(t.Context(), `SELECT key FROM drainer.outbox WHERE kind = 'compensation'`).Scan(&comp); err != nil {
		t.Fatal(err)
	}
	e.set(comp, "compensation_failed", 8)
	if st, err := store.MustNew("drainer").AdvanceSaga(t.Context(), e.pool, "r1", m); err != nil || st != outbox.SagaHalted {
		t.Fatalf("advance = %q, %v; want halted", st, err)
	}

	if _, err := e.c.Resolve(t.Context(), comp, Resolution{Note: "x", Outcome: "succeeded"}, alice); !errors.Is(err, ErrOutcomeNotAllowed) {
		t.Fatalf("outcome on compensation_failed: err = %v", err)
	}
	res, err := e.c.Resolve(t.Context(), comp, Resolution{Note: "refunded by hand, ticket 7"}, alice)
	if err != nil {
		t.Fatal(err)
	}
	if r := e.row(comp); r.Status != "cancelled" || *r.Note != "refunded by hand, ticket 7" || !strings.Contains(*r.LastError, "refunded by hand") {
		t.Fatalf("compensation row = %+v", r)
	}
	if e.status(k[1]) != "compensated" || res.ForwardKey != k[1] || res.ForwardStatus != "compensated" {
		t.Fatalf("forward row %s, result %+v", e.status(k[1]), res)
	}
	if res.SagaState != "waiting" || e.count(`SELECT count(*) FROM drainer.runs WHERE saga_state = 'waiting'`) != 1 {
		t.Fatalf("saga state = %q", res.SagaState)
	}
	if a := e.lastAudit(k[1]); a.Event != "operator:resolve" || a.Actor != "alice" {
		t.Fatalf("forward audit = %+v", a)
	}
	// The saga continues with the next compensation (of k[0]).
	if st, err := store.MustNew("drainer").AdvanceSaga(t.Context(), e.pool, "r1", m); err != nil || st != outbox.SagaCompensating {
		t.Fatalf("advance after resolve = %q, %v", st, err)
	}
}
