package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
)

// TestClaimKeyLeasesOneDueRowOnce: a claim by key leases that row alone,
// as a claim would (in flight, one attempt, a lease token, this replica),
// and only once; it leases nothing for a row that is not due, that an
// earlier row of its scope holds (an ordered tool), whose tool is
// excluded, or for a key nobody enqueued; and a row it leased is not
// claimed again.
func TestClaimKeyLeasesOneDueRowOnce(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := context.Background()
	claim := store.Claim{Lease: time.Minute, Replica: "gw"}
	keys := storetest.Enqueue(t, pool, "run", "t", 3)

	row, err := st.ClaimKey(ctx, pool, keys[1], claim)
	if err != nil || row == nil {
		t.Fatalf("claim %s: %v, %v", keys[1], row, err)
	}
	if row.Key != keys[1] || row.Attempts != 1 || !row.LeaseToken.Valid || row.ToolName != "t" || row.AgentRunID != "run" {
		t.Fatalf("claimed %+v, want %s with its first attempt and a lease", row, keys[1])
	}
	var status, by string
	if err := pool.QueryRow(ctx, `SELECT status, leased_by FROM drainer.outbox WHERE key = $1`, keys[1]).Scan(&status, &by); err != nil {
		t.Fatal(err)
	}
	if status != "in_flight" || by != "gw" {
		t.Fatalf("%s is %s, leased by %q; want in_flight, by gw", keys[1], status, by)
	}
	if again, err := st.ClaimKey(ctx, pool, keys[1], claim); err != nil || again != nil {
		t.Fatalf("claim of a leased row: %v, %v; want none", again, err)
	}
	rows, err := st.Claim(ctx, pool, store.Claim{Limit: 10, Lease: time.Minute, Replica: "r"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Key == keys[1] {
			t.Fatalf("a claim leased %s again", keys[1])
		}
	}
	if len(rows) != 2 {
		t.Fatalf("the claim leased %d rows, want the other 2", len(rows))
	}

	// Not due, held by its scope's order, excluded, unknown.
	later := storetest.Enqueue(t, pool, "run2", "t", 1)[0]
	if _, err := pool.Exec(ctx, `UPDATE drainer.queue SET next_attempt_at = now() + interval '1 hour'
	      WHERE seq = (SELECT seq FROM drainer.intents WHERE key = $1)`, later); err != nil {
		t.Fatal(err)
	}
	if r, err := st.ClaimKey(ctx, pool, later, claim); err != nil || r != nil {
		t.Fatalf("claim of a row due in an hour: %v, %v; want none", r, err)
	}
	ordered := storetest.Enqueue(t, pool, "run3", "o", 2) // one scope: the second waits for the first
	held := claim
	held.Ordered = []string{"o"}
	if r, err := st.ClaimKey(ctx, pool, ordered[1], held); err != nil || r != nil {
		t.Fatalf("claim of an ordered row behind an open one of its scope: %v, %v; want none", r, err)
	}
	excluded := claim
	excluded.Excluded = []string{"o"}
	if r, err := st.ClaimKey(ctx, pool, ordered[0], excluded); err != nil || r != nil {
		t.Fatalf("claim of an excluded tool's row: %v, %v; want none", r, err)
	}
	if r, err := st.ClaimKey(ctx, pool, ordered[0], held); err != nil || r == nil || r.Key != ordered[0] {
		t.Fatalf("claim of the first ordered row of its scope: %v, %v; want it", r, err)
	}
	if r, err := st.ClaimKey(ctx, pool, "idem_v1_00000000000000000000000000000000", claim); err != nil || r != nil {
		t.Fatalf("claim of a key nobody enqueued: %v, %v; want none", r, err)
	}
}
