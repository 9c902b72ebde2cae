package ops

import (
	"strings"
	"testing"
)

// mixedHistory runs a mix of daemon changes and operator actions.
func mixedHistory(t *testing.T, e *env) []string {
	t.Helper()
	k := e.enqueue("r1", "charge", 4)
	e.set(k[0], "succeeded", 1)
	e.set(k[1], "outcome_unknown", 1)
	if _, err := e.c.Resolve(t.Context(), k[1], Resolution{Note: "checked", Outcome: "failed"}, alice); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Requeue(t.Context(), k[1], alice, BulkOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Cancel(t.Context(), k[2], alice, false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Pause(t.Context(), TargetRoute, "charge", alice); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Resume(t.Context(), TargetRoute, "charge", alice); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Abort(t.Context(), "r1", alice); err != nil {
		t.Fatal(err)
	}
	return k
}

func TestAuditVerify(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mixedHistory(t, e)
	v, err := e.c.VerifyAudit(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if !v.OK || v.Entries < 15 || v.Chains != 6 || len(v.Broken) != 0 {
		t.Fatalf("clean verification = %+v", v)
	}
}

func TestAuditVerifyFindsEdits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := mixedHistory(t, e)
	var id int64
	if err := e.pool.QueryRow(t.Context(), `SELECT id FROM drainer.audit WHERE key = $1 AND actor = 'alice' ORDER BY id LIMIT 1`, k[1]).Scan(&id); err != nil {
		t.Fatal(err)
	}
	e.exec(`UPDATE drainer.audit SET actor = 'mallory' WHERE id = $1`, id)
	v, err := e.c.VerifyAudit(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if v.OK || len(v.Broken) != 1 || v.Broken[0].ID != id || v.Broken[0].Key != k[1] || !strings.Contains(v.Broken[0].Problem, "edited") {
		t.Fatalf("verification = %+v, want entry %d edited", v, id)
	}
}

func TestAuditVerifyFindsDeletions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := mixedHistory(t, e)
	var gone, next int64
	if err := e.pool.QueryRow(t.Context(), `SELECT id, lead(id) OVER (ORDER BY id) FROM drainer.audit WHERE key = $1 ORDER BY id LIMIT 1`, k[1]).
		Scan(&gone, &next); err != nil {
		t.Fatal(err)
	}
	e.exec(`DELETE FROM drainer.audit WHERE id = $1`, gone)
	v, err := e.c.VerifyAudit(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if v.OK || len(v.Broken) != 1 || v.Broken[0].ID != next || !strings.Contains(v.Broken[0].Problem, "removed") {
		t.Fatalf("verification = %+v, want entry %d's link broken", v, next)
	}
}
