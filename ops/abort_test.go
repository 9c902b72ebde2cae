package ops

import (
	"errors"
	"testing"
)

func TestAbort(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := e.enqueue("r1", "charge", 3)
	e.set(k[0], "pending", 1)

	if _, err := e.c.Abort(t.Context(), "r1", Who{Actor: "alice"}); err == nil {
		t.Fatal("abort without a reason was accepted")
	}
	res, err := e.c.Abort(t.Context(), "r1", alice)
	if err != nil {
		t.Fatal(err)
	}
	if res.Cancelled != 2 || res.AlreadyAborted || res.AbortedBy != "alice" || res.AbortReason != alice.Reason {
		t.Fatalf("result = %+v", res)
	}
	if e.status(k[0]) != "pending" || e.status(k[1]) != "cancelled" {
		t.Fatal("abort cancelled the wrong rows")
	}
	if a := e.lastAudit("run:r1"); a.Event != "operator:abort" || a.Actor != "alice" || *a.Reason != alice.Reason {
		t.Fatalf("run audit = %+v", a)
	}
	if a := e.lastAudit(k[1]); a.Event != "operator:abort" || a.Actor != "alice" {
		t.Fatalf("row audit = %+v", a)
	}
	res, err = e.c.Abort(t.Context(), "r1", Who{Actor: "bob", Reason: "again"})
	if err != nil || !res.AlreadyAborted || res.AbortedBy != "alice" || res.Cancelled != 0 {
		t.Fatalf("second abort = %+v, %v", res, err)
	}
	_, err = e.c.Abort(t.Context(), "nope", alice)
	var nf *NotFoundError
	if !errors.As(err, &nf) || err.Error() != "no row with agent_run_id nope" {
		t.Fatalf("unknown run: err = %v", err)
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p, err := e.c.Pause(t.Context(), TargetRoute, "charge_card", alice)
	if err != nil {
		t.Fatal(err)
	}
	if p.PausedBy != "alice" || p.Reason != alice.Reason {
		t.Fatalf("pause = %+v", p)
	}
	if _, err := e.c.Pause(t.Context(), TargetAdapter, "payments", Who{Actor: "bob"}); err != nil {
		t.Fatal(err)
	}
	_, err = e.c.Pause(t.Context(), TargetRoute, "charge_card", alice)
	var pe *PauseError
	if !errors.As(err, &pe) || !pe.Paused || pe.By != "alice" {
		t.Fatalf("second pause: err = %v", err)
	}
	ps, err := e.c.Pauses(t.Context())
	if err != nil || len(ps) != 2 || ps[0].Target != "route" || ps[1].Name != "payments" {
		t.Fatalf("pauses = %+v, %v", ps, err)
	}
	if _, err := e.c.Resume(t.Context(), TargetRoute, "charge_card", Who{Actor: "carol", Reason: "fixed"}); err != nil {
		t.Fatal(err)
	}
	_, err = e.c.Resume(t.Context(), TargetRoute, "charge_card", alice)
	if !errors.As(err, &pe) || pe.Paused || err.Error() != "route charge_card is not paused" {
		t.Fatalf("second resume: err = %v", err)
	}
	if a := e.lastAudit("route:charge_card"); a.Event != "operator:resume" || a.Actor != "carol" || *a.Reason != "fixed" {
		t.Fatalf("audit = %+v", a)
	}
	if a := e.lastAudit("adapter:payments"); a.Event != "operator:pause" || a.Actor != "bob" || a.Reason != nil {
		t.Fatalf("audit = %+v", a)
	}
	if _, err := e.c.Pause(t.Context(), "queue", "x", alice); err == nil {
		t.Fatal("bad target accepted")
	}
}
