package ops

import (
	"github.com/drainer-io/drainer/outbox"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/compensations"
	"github.com/drainer-io/drainer/store"
)

func TestCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := e.enqueue("r1", "charge", 4)

	res, err := e.c.Cancel(t.Context(), k[0], alice, false)
	if err != nil {
		t.Fatal(err)
	}
	r := e.row(k[0])
	if r.Status != "cancelled" || r.LastError == nil || *r.LastError != "cancelled by alice: provider outage INC-42" {
		t.Fatalf("row = %+v", r)
	}
	if res.Count != 1 || res.Warnings != 0 {
		t.Fatalf("result = %+v", res)
	}
	if a := e.lastAudit(k[0]); a.Event != "operator:cancel" || a.Actor != "alice" || *a.Reason != alice.Reason || *a.To != "cancelled" {
		t.Fatalf("audit = %+v", a)
	}

	// An attempted row is cancelled with a warning.
	e.set(k[1], "pending", 2)
	res, err = e.c.Cancel(t.Context(), k[1], alice, false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Warnings != 1 || !strings.Contains(res.Rows[0].Warning, "may have had its effect") {
		t.Fatalf("result = %+v", res)
	}

	for status, why := range map[outbox.Status]string{
		"in_flight":           "holds its lease",
		"succeeded":           "final already",
		"outcome_unknown":     "drainer resolve",
		"compensation_failed": "drainer resolve",
	} {
		e.set(k[2], status, 1)
		_, err := e.c.Cancel(t.Context(), k[2], alice, false)
		if te := wantRefused(t, err, k[2], status); !strings.Contains(te.Why, why) {
			t.Errorf("%s: why = %q", status, te.Why)
		}
	}
	// Cancelling a cancelled row is refused too.
	_, err = e.c.Cancel(t.Context(), k[0], alice, false)
	wantRefused(t, err, k[0], "cancelled")
}

func TestCancelRefusesCompensationRows(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := e.enqueue("r1", "charge", 2)
	e.set(k[0], "succeeded", 1)
	if _, err := e.c.Abort(t.Context(), "r1", alice); err != nil {
		t.Fatal(err)
	}
	m := compensations.NewMap(map[string]string{"charge": "refund"})
	if _, err := store.MustNew("drainer").AdvanceSaga(t.Context(), e.pool, "r1", m); err != nil {
		t.Fatal(err)
	}
	var comp string
	if err := e.pool.QueryRow(t.Context(), `SELECT key FROM drainer.outbox WHERE kind = 'compensation'`).Scan(&comp); err != nil {
		t.Fatal(err)
	}
	_, err := e.c.Cancel(t.Context(), comp, alice, false)
	if te := wantRefused(t, err, comp, "pending"); !strings.Contains(te.Why, "compensation row") {
		t.Fatalf("why = %q", te.Why)
	}
}

func TestCancelWhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := e.enqueue("r1", "charge", 4)
	other := e.enqueue("r2", "charge", 1)
	e.set(k[1], "pending", 3)
	e.set(k[2], "succeeded", 1)

	dry, err := e.c.CancelWhere(t.Context(), Filter{Run: "r1"}, alice, BulkOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if dry.Count != 3 || dry.Warnings != 1 || e.count(`SELECT count(*) FROM drainer.outbox WHERE status = 'cancelled'`) != 0 {
		t.Fatalf("dry run = %+v", dry)
	}
	res, err := e.c.CancelWhere(t.Context(), Filter{Run: "r1"}, alice, BulkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Count != 3 || res.Warnings != 1 || res.RefusedCount != 0 {
		t.Fatalf("result = %+v", res)
	}
	if e.status(k[2]) != "succeeded" || e.status(other[0]) != "pending" || e.status(k[3]) != "cancelled" {
		t.Fatal("cancel touched the wrong rows")
	}
	if _, err := e.c.CancelWhere(t.Context(), Filter{}, alice, BulkOptions{}); err == nil {
		t.Fatal("cancel without --run was accepted")
	}
	if _, err := e.c.CancelWhere(t.Context(), Filter{Run: "r1", Status: "failed"}, alice, BulkOptions{}); err == nil {
		t.Fatal("cancel of failed rows was accepted")
	}
}
