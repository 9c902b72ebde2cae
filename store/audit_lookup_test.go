package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
)

// TestAuditKeyLookupsReadOneKey: the look-ups of a key's latest audit
// entry (audit_head: every enqueue of a new key, the rotation's moves,
// retention; enqueue_batch's own look-up of each new key's head;
// audit_problems: `audit verify` and `inspect`) read that key's
// entries through the per-key index, whatever the planner knows of the
// audit's generations. A generation without statistics (new, or filled
// faster than autovacuum analyzes it) gives an equality on key the default
// selectivity, a few hundred rows per key; "the latest entry" could then be
// read backwards along the id index, entry by entry, until one of the key
// turns up: the whole generation for a key that has none (each enqueue of
// a new key) and, for `audit verify`, as many entries for each of the
// queue's rows (20,000 rows took it 75 s).
func TestAuditKeyLookupsReadOneKey(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := t.Context()
	// No statistics on the audit's generations, as before their first
	// analyze.
	if _, err := pool.Exec(ctx, `DO $$
	    DECLARE p text;
	    BEGIN
	        FOR p IN SELECT c.relname FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid
	                  WHERE h.inhparent = 'drainer.audit'::regclass LOOP
	            EXECUTE format('ALTER TABLE drainer.%I SET (autovacuum_enabled = false)', p);
	        END LOOP;
	    END $$`); err != nil {
		t.Fatal(err)
	}
	const n = 10_000
	storetest.Enqueue(t, pool, "run-lookup", "t", n)
	drainAll(t, st, pool, func(int) outbox.Status { return outbox.StatusSucceeded })
	if _, err := pool.Exec(ctx, `DELETE FROM pg_statistic s USING pg_inherits h
	        WHERE h.inhparent = 'drainer.audit'::regclass AND s.starelid = h.inhrelid`); err != nil {
		t.Fatal(err)
	}
	entries := scalar[int64](t, pool, `SELECT count(*) FROM drainer.audit`)
	if entries < 2*n {
		t.Fatalf("%d audit entries, want at least %d", entries, 2*n)
	}

	// The blocks of the audit's tables and indexes a statement read, in a
	// transaction of its own (the backend's counts are read before and
	// after, within it).
	const fetched = `SELECT coalesce(sum(pg_stat_get_xact_blocks_fetched(c.oid)), 0)::bigint
	      FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
	     WHERE s.nspname = 'drainer' AND c.relname LIKE 'audit%'`
	read := func(sql string, args ...any) int64 {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		before := scalar[int64](t, tx, fetched)
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			t.Fatal(err)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return scalar[int64](t, tx, fetched) - before
	}

	// A key with no entry (an enqueue's new key), and one with two: a few
	// blocks each, every time (the sixth call on is planned for any key),
	// where reading the generation would take some 650.
	some := scalar[string](t, pool, `SELECT key FROM drainer.intents ORDER BY seq LIMIT 1`)
	for i := range 8 {
		for _, key := range []string{"idem_v1_00000000000000000000000000000000", some} {
			if b := read(`SELECT drainer.audit_head($1)`, key); b > 50 {
				t.Fatalf("call %d: audit_head(%s) read %d blocks of the audit (%d entries); want those of its key", i+1, key, b, entries)
			}
			// inspect's check of one chain
			if b := read(`SELECT * FROM drainer.audit_problems($1)`, key); b > 200 {
				t.Fatalf("call %d: audit_problems(%s) read %d blocks of the audit (%d entries); want those of its key", i+1, key, b, entries)
			}
		}
	}
	// A batch of new keys (drainer.enqueue_batch, which looks each key's
	// head up inline, and writes its entries): about 13 blocks a key,
	// where reading the generation for each took some 650 a key.
	const batch = 100
	for i := range 3 {
		runs, steps, tools, scopes, payloads := make([]string, batch), make([]string, batch), make([]string, batch), make([]string, batch), make([]string, batch)
		for j := range batch {
			runs[j], steps[j], tools[j], payloads[j] = "run-lookup-batch", fmt.Sprintf("b%d-%d", i, j), "t", "{}"
		}
		b := read(`SELECT * FROM drainer.enqueue_batch($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]::jsonb[])`,
			runs, steps, tools, scopes, payloads)
		t.Logf("batch %d: enqueue_batch of %d new keys read %d blocks of the audit", i+1, batch, b)
		if b > 50*batch {
			t.Fatalf("batch %d: enqueue_batch of %d new keys read %d blocks of the audit (%d entries); want those of its keys", i+1, batch, b, entries)
		}
	}
	// audit verify: the queue's rows against their chains' last entries;
	// it reads each entry a few times, not each row's worth of entries.
	began := time.Now()
	b := read(`SELECT * FROM drainer.audit_problems(NULL)`)
	if b > 40*entries {
		t.Fatalf("audit_problems read %d blocks for %d entries (%s); each row's look-up reads the entries of other keys", b, entries, time.Since(began))
	}
	// Beyond the chains' own check, each row's chain is looked up once,
	// for its last entry and its last recorded status together: 8 blocks
	// a row here (the per-key index, the row's two entries, its anchor).
	// Looked up apart, they read 12.
	chains := read(`SELECT * FROM drainer.audit_chain_problems(NULL, NULL)`)
	rows := scalar[int64](t, pool, `SELECT count(*) FROM drainer.queue`)
	perRow := float64(b-chains) / float64(rows)
	t.Logf("audit_problems read %d blocks of the audit for %d entries: %d in the chains' check, %.2f a row beside it", b, entries, chains, perRow)
	if perRow > 10 {
		t.Fatalf("audit_problems read %.2f blocks a row beside the chains' check, want at most 10 (one look-up of each row's chain)", perRow)
	}
	assertAuditVerifies(t, pool)
}
