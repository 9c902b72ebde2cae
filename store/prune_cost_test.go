package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// measuredTx begins a transaction on a connection of pool whose table
// statistics were just flushed: pg_stat_xact_user_tables then counts what
// the transaction reads, and nothing before it. It is rolled back at the
// test's end unless committed.
func measuredTx(t *testing.T, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	conn, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	if _, err := conn.Exec(t.Context(), `SELECT pg_stat_force_next_flush()`); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// TestPruneReadsWhatItPrunes: a retention pass over rows of one status
// reads about as many rows as it prunes, however many more are waiting,
// with the statistics the drain leaves behind (taken while every row was
// pending, so they say none has the status pruned) and with fresh
// ones. Before, each pass
// sorted every prunable row and found each victim again by scanning the
// status index: pruning 100 of 3,000 read over 300,000 tuples, and a
// backlog of a million rows would take hours to prune.
func TestPruneReadsWhatItPrunes(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	ctx := t.Context()
	const n, limit = 3000, 100
	storetest.Enqueue(t, pool, "run-prune-cost", "t", n)
	if _, err := pool.Exec(ctx, `ANALYZE drainer.queue`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE drainer.queue SET status = 'succeeded', attempts = 1, updated_at = now() - interval '1 hour'`); err != nil {
		t.Fatal(err)
	}

	pass := func(stats string) {
		t.Helper()
		tx := measuredTx(t, pool)
		if got := scalar[int32](t, tx, `SELECT drainer.prune_rows('succeeded', now(), $1, '{}'::text[], '{}'::bigint[])`, limit); got != limit {
			t.Fatalf("%s: prune_rows pruned %d rows, want %d", stats, got, limit)
		}
		read := scalar[int64](t, tx, `SELECT coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0)::bigint
		      FROM pg_stat_xact_user_tables
		     WHERE relid = 'drainer.intents'::regclass
		        OR relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'drainer.queue'::regclass)`)
		t.Logf("%s: pruning %d of %d rows read %d tuples of the queue and intents", stats, limit, n, read)
		if read > 10*limit {
			t.Fatalf("%s: pruning %d of %d rows read %d tuples of the queue and intents, want at most %d", stats, limit, n, read, 10*limit)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	pass("statistics of pending rows")
	if _, err := pool.Exec(ctx, `ANALYZE drainer.queue`); err != nil {
		t.Fatal(err)
	}
	pass("fresh statistics")
	if left := scalar[int64](t, pool, `SELECT count(*) FROM drainer.queue WHERE status = 'succeeded'`); left != n-2*limit {
		t.Fatalf("%d succeeded rows left, want %d", left, n-2*limit)
	}
	if tomb := scalar[int64](t, pool, `SELECT count(*) FROM drainer.keys WHERE pruned_at IS NOT NULL`); tomb != 2*limit {
		t.Fatalf("%d tombstones, want %d", tomb, 2*limit)
	}
	assertAuditVerifies(t, pool)
}

// TestTombstonePruneReadsWhatItForgets: forgetting tombstones past their
// age reads about as many keys as it forgets, with fresh statistics too:
// each pass looks its victims up by key; and each key's audit chain is
// read once. Before, a pass's DELETE joined
// its victims against a scan of the whole key space (forgetting 500 of
// 98,000 tombstones took 1.6 s a pass, and a million of them hours).
func TestTombstonePruneReadsWhatItForgets(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := t.Context()
	const n, batch = 3000, 100
	storetest.Enqueue(t, pool, "run-tombstone-cost", "t", n)
	if _, err := pool.Exec(ctx, `UPDATE drainer.queue SET status = 'succeeded', attempts = 1, updated_at = now() - interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	if got := scalar[int32](t, pool, `SELECT drainer.prune_rows('succeeded', now(), $1, '{}'::text[], '{}'::bigint[])`, n); got != n {
		t.Fatalf("prune_rows pruned %d rows, want %d", got, n)
	}
	if _, err := pool.Exec(ctx, `ANALYZE drainer.keys`); err != nil {
		t.Fatal(err)
	}

	tx := measuredTx(t, pool)
	keep := 1000 * time.Hour
	r := store.Retention{ByStatus: map[outbox.Status]time.Duration{outbox.StatusSucceeded: keep, outbox.StatusCancelled: keep,
		outbox.StatusCompensated: keep, outbox.StatusFailed: keep}, Tombstones: 0, Audit: keep, BatchSize: batch}
	done, err := st.Prune(ctx, tx, r, time.Minute)
	if err != nil || done["tombstone"] != n {
		t.Fatalf("prune: %v, %v; want %d tombstones forgotten", done, err, n)
	}
	read := scalar[int64](t, tx, `SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables
	      WHERE relid = 'drainer.keys'::regclass`)
	t.Logf("forgetting %d tombstones, %d a pass, read %d keys", n, batch, read)
	if read > 5*n {
		t.Fatalf("forgetting %d tombstones, %d a pass, read %d keys, want at most %d", n, batch, read, 5*n)
	}
	// Each key's chain has two entries (enqueued, succeeded), read once:
	// its last entry (the head) and its last status come from the same
	// look-up. Looked up apart, and once more to test that the chain has
	// entries at all, they read every entry three times: 6 a key.
	entries := scalar[int64](t, tx, `SELECT coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0)::bigint
	      FROM pg_stat_xact_user_tables
	     WHERE relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'drainer.audit'::regclass)`)
	t.Logf("forgetting %d tombstones read %d audit entries", n, entries)
	if entries > 2*n {
		t.Fatalf("forgetting %d tombstones read %d audit entries, want at most %d (each chain's two entries, once)", n, entries, 2*n)
	}
}
