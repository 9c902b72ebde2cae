package store_test

import (
	"testing"
	"time"

	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
)

// TestUncountedClaimVerifies: a row claimed without its attempt counted
// (its tool had no route at the claimer: store.Claim.Routed) is in flight
// with the attempts its chain last recorded, and audit verify takes that
// for what it is, not for a change the audit missed (it reported every
// unrouted row in flight as "the row has 0 attempts but its chain's last
// change records 0"). A counted claim's row has one attempt more; any
// other count is still reported.
func TestUncountedClaimVerifies(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	ctx := t.Context()
	st := store.MustNew(storetest.Schema)
	storetest.Enqueue(t, pool, "run-unrouted", "unrouted", 2)
	storetest.Enqueue(t, pool, "run-routed", "routed", 2)
	rows, err := st.Claim(ctx, pool, store.Claim{Limit: 4, Lease: time.Minute, Replica: "r", Routed: []string{"routed"}})
	if err != nil || len(rows) != 4 {
		t.Fatalf("claim: %d rows, %v", len(rows), err)
	}
	problems := func() []string {
		t.Helper()
		r, err := pool.Query(ctx, `SELECT key || ': ' || problem FROM drainer.audit_verify(1000)`)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for r.Next() {
			var p string
			if err := r.Scan(&p); err != nil {
				t.Fatal(err)
			}
			out = append(out, p)
		}
		return out
	}
	if p := problems(); len(p) != 0 {
		t.Fatalf("audit verify with rows in flight, two claimed uncounted: %v, want none", p)
	}
	var key string
	for _, r := range rows {
		if r.ToolName == "routed" {
			key = r.Key
		}
	}
	if _, err := pool.Exec(ctx, `ALTER TABLE drainer.queue DISABLE TRIGGER USER;
		UPDATE drainer.queue SET attempts = 3 WHERE seq = (SELECT seq FROM drainer.intents WHERE key = '`+key+`');
		ALTER TABLE drainer.queue ENABLE TRIGGER USER`); err != nil {
		t.Fatal(err)
	}
	if p := problems(); len(p) != 1 {
		t.Fatalf("audit verify after an in-flight row's attempts were set to 3 behind the audit's back: %v, want it reported", p)
	}
}
