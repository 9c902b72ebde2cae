package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store/storetest"
)

// TestViewWriteNeverUndoesAConcurrentChange: a statement on the outbox view
// reads its rows without locking them. When another transaction changes a
// row between that read and the write (here a claim, holding the queue
// row's lock until it commits), the write through the view must not put
// back the state it read: the row keeps the claim, and the statement counts
// it as not matched, as an UPDATE or DELETE of a table skips a row that no
// longer matches its WHERE.
func TestViewWriteNeverUndoesAConcurrentChange(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	ctx := context.Background()
	for _, tc := range []struct{ name, stmt string }{
		{"update", `UPDATE drainer.outbox SET status = 'cancelled', cancel_cause = 'operator', updated_at = now()
		             WHERE key = $1 AND status = 'pending' AND attempts = 0`},
		{"delete", `DELETE FROM drainer.outbox WHERE key = $1 AND status = 'pending'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := storetest.Enqueue(t, pool, "run-"+tc.name, "t", 1)[0]
			claimer, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = claimer.Rollback(ctx) }()
			if _, err := claimer.Exec(ctx, `UPDATE drainer.queue q
			        SET status = 'in_flight', attempts = 1, lease_token = gen_random_uuid(),
			            lease_expires_at = now() + interval '1 minute', leased_by = 'r', updated_at = now()
			       FROM drainer.intents i WHERE i.key = $1 AND q.seq = i.seq`, key); err != nil {
				t.Fatal(err)
			}

			writer, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer writer.Release()
			var pid int
			if err := writer.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				t.Fatal(err)
			}
			done := make(chan int64, 1)
			errs := make(chan error, 1)
			go func() {
				tag, err := writer.Exec(ctx, tc.stmt, key)
				errs <- err
				done <- tag.RowsAffected()
			}()
			// The view statement has read the pending row and waits for the
			// claim's lock on its queue row.
			deadline := time.Now().Add(30 * time.Second)
			for {
				var waiting bool
				if err := pool.QueryRow(ctx, `SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waiting); err != nil {
					t.Fatal(err)
				}
				if waiting {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the statement on the view never waited for the claim's lock")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := claimer.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-errs; err != nil {
				t.Fatalf("%s through the view: %v", tc.name, err)
			}
			if n := <-done; n != 0 {
				t.Errorf("%s through the view counted %d rows; the row it read had changed", tc.name, n)
			}
			got := storetest.Get(t, pool, key)
			if got.Status != outbox.StatusInFlight || got.Attempts != 1 {
				t.Fatalf("after a %s through the view raced a claim: status %s, attempts %d; want the claim's in_flight, 1",
					tc.name, got.Status, got.Attempts)
			}
		})
	}
}
