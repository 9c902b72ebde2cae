package store_test

import (
	"testing"
	"time"

	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
)

// TestEveryWriterKeepsTheFloor: each statement that moves next_attempt_at
// outside a provider's answer (a wake, a deferral, a reclaim) leaves a row
// at or after its not_before floor.
func TestEveryWriterKeepsTheFloor(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := t.Context()
	keys := storetest.Enqueue(t, pool, "run", "t", 3)
	if _, err := pool.Exec(ctx, `UPDATE drainer.outbox SET not_before = now() + interval '1 hour', next_attempt_at = now() + interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	check := func(what string) {
		t.Helper()
		for _, k := range keys {
			if next := storetest.Get(t, pool, k).DueIn; next < 59*time.Minute {
				t.Fatalf("%s moved row %s to %s from now, before its floor", what, k, next)
			}
		}
	}
	if err := st.Wake(ctx, pool, []string{"t"}); err != nil {
		t.Fatal(err)
	}
	check("a wake")
	if _, err := pool.Exec(ctx, `UPDATE drainer.outbox SET next_attempt_at = now()`); err != nil {
		t.Fatal(err)
	}
	check("a plain update")
	if _, err := st.Defer(ctx, pool, "t", time.Second); err != nil {
		t.Fatal(err)
	}
	check("a deferral")
	// A lease that expires goes back to pending at its floor, not now.
	if _, err := pool.Exec(ctx, `UPDATE drainer.outbox SET status = 'in_flight', lease_token = gen_random_uuid(),
	        lease_expires_at = now() - interval '1 second', leased_by = 'gone', attempts = 1`); err != nil {
		t.Fatal(err)
	}
	if n, err := st.Reclaim(ctx, pool, store.ReclaimPolicy{}); err != nil || n != len(keys) {
		t.Fatalf("reclaim: %d %v", n, err)
	}
	check("a reclaim")
	// Clearing the floor (an operator's explicit override) lets it move.
	if _, err := pool.Exec(ctx, `UPDATE drainer.outbox SET not_before = NULL, next_attempt_at = now()`); err != nil {
		t.Fatal(err)
	}
	if next := storetest.Get(t, pool, keys[0]).DueIn; next > time.Second {
		t.Fatalf("with its floor cleared the row is still %s away", next)
	}
}
