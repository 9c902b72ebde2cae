package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/jackc/pgx/v5"
)

// TestAuditRotationTruncatesOnlyWhatNoSnapshotNeeds walks the audit's
// generations through one turn: the current generation is closed and
// sealed; once past the retention it is anchored (each chain's last hash
// kept) while a REPEATABLE READ reader whose snapshot predates the anchors
// is open, and is not truncated until that reader has ended (the reader
// sees every chain whole before and after the steps that ran meanwhile);
// an entry written into the closed generation by hand is anchored before
// the truncation; afterwards every chain verifies from its anchor, new
// entries on a truncated chain link to it, and an edit is still caught.
// Retention and span are passed per step, so no step depends on time.
func TestAuditRotationTruncatesOnlyWhatNoSnapshotNeeds(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := context.Background()
	const keep, now = time.Hour, time.Duration(0)
	step := func(retention, span time.Duration) string {
		t.Helper()
		s, err := st.RotateAudit(ctx, pool, retention, span)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// until steps with these settings until cond holds
	until := func(what string, retention, span time.Duration, cond func() bool) []string {
		t.Helper()
		// Another backend's transaction (autovacuum, another test's: they
		// share the cluster) makes the rotation wait: it is asked again,
		// for up to two minutes; 200 steps that did something are a bound
		// of their own.
		var steps []string
		for waitedUntil := time.Now().Add(2 * time.Minute); !cond(); {
			s := step(retention, span)
			if s == "waiting" || s == "busy" || s == "idle" {
				if time.Now().After(waitedUntil) {
					t.Fatalf("%s: still %s after two minutes (steps: %v)", what, s, steps)
				}
				time.Sleep(5 * time.Millisecond)
				continue
			}
			steps = append(steps, s)
			if len(steps) > 200 {
				t.Fatalf("%s: not after %v", what, steps)
			}
		}
		return steps
	}
	verify := func(when string) {
		t.Helper()
		if broken, err := st.VerifyAudit(ctx, pool, 20); err != nil || len(broken) != 0 {
			t.Fatalf("audit verify %s: %v %v", when, broken, err)
		}
	}
	// Rows with a few entries each, in generation 1 (the current one).
	keys := storetest.Enqueue(t, pool, "run", "t", 6)
	rows, err := st.Claim(ctx, pool, store.Claim{Limit: 3, Lease: time.Minute, Replica: "r"})
	if err != nil || len(rows) != 3 {
		t.Fatalf("claim: %d rows, %v", len(rows), err)
	}
	var cs []store.Completion
	for _, r := range rows {
		cs = append(cs, store.Completion{Seq: r.Seq, Token: r.LeaseToken, Attempts: r.Attempts, Status: outbox.StatusSucceeded})
	}
	if _, err := st.Complete(ctx, pool, cs); err != nil {
		t.Fatal(err)
	}
	if err := st.AuditAppendEach(ctx, pool, []string{"route:t"}, "operator:pause", nil); err != nil {
		t.Fatal(err)
	}
	inOne := scalar[int](t, pool, `SELECT count(*) FROM drainer.audit WHERE part = 1`)
	if inOne < 10 {
		t.Fatalf("%d entries in generation 1, want the enqueues, the completions and the note", inOne)
	}

	// Generation 1 is closed (2 becomes current), a chain goes on in 2,
	// then 2 is closed (3 becomes current), and both are sealed; nothing
	// is past a retention of an hour, so nothing is anchored.
	until("generation 2 current", keep, now, func() bool {
		return scalar[int](t, pool, `SELECT count(*) FROM drainer.audit_generations WHERE current AND part = 2`) == 1
	})
	if err := st.AuditAppendEach(ctx, pool, []string{"route:t"}, "operator:note", nil); err != nil {
		t.Fatal(err)
	}
	until("generation 3 current", keep, now, func() bool {
		return scalar[int](t, pool, `SELECT count(*) FROM drainer.audit_generations WHERE current AND part = 3`) == 1
	})
	until("generations 1 and 2 sealed", keep, keep, func() bool {
		return scalar[int](t, pool, `SELECT count(*) FROM drainer.audit_generations WHERE part IN (1, 2) AND wait_for IS NOT NULL`) == 2
	})
	if n := scalar[int](t, pool, `SELECT count(*) FROM drainer.audit_anchors`); n != 0 {
		t.Fatalf("%d anchors before any generation was past the retention", n)
	}
	// Generation 0 (the table before migration 021, empty here) goes
	// first: as if closed two hours ago, it is truncated under a retention
	// of an hour; generation 1, closed just now, is not touched.
	if _, err := pool.Exec(ctx, `UPDATE drainer.audit_generations SET closed_at = now() - interval '2 hours' WHERE part = 0`); err != nil {
		t.Fatal(err)
	}
	until("generation 0 truncated", keep, keep, func() bool {
		return scalar[int](t, pool, `SELECT count(*) FROM drainer.audit_generations WHERE part = 0 AND ready`) == 1
	})
	if n := scalar[int](t, pool, `SELECT count(*) FROM drainer.audit_generations WHERE part = 1 AND anchored_to IS NULL`); n != 1 {
		t.Fatal("generation 1 was anchored under a retention of an hour")
	}

	// A reader whose snapshot predates the anchors.
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// Its snapshot is taken by a read of another table: it holds no lock
	// on the audit that would stop a truncation by itself.
	var rows0 int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM drainer.intents`).Scan(&rows0); err != nil || rows0 != len(keys) {
		t.Fatalf("the reader's first read: %d rows (%v)", rows0, err)
	}
	readerSees := func(when string) {
		t.Helper()
		var problems, entries int
		if err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM drainer.audit_verify(100)), (SELECT count(*) FROM drainer.audit WHERE part = 1)`).Scan(&problems, &entries); err != nil {
			t.Fatal(err)
		}
		if problems != 0 || entries != inOne {
			t.Fatalf("the old snapshot %s: %d problems, %d entries of generation 1 (want 0 and %d)", when, problems, entries, inOne)
		}
	}
	// Everything is past a retention of zero now: generation 1 is
	// anchored, but not truncated while the reader is open.
	steps := until("generation 1 anchored", now, keep, func() bool {
		return scalar[int](t, pool, `SELECT count(*) FROM drainer.audit_generations WHERE part = 1 AND anchored_to IS NOT NULL`) == 1
	})
	if n := scalar[int](t, pool, `SELECT count(*) FROM drainer.audit_anchors WHERE key = ANY($1) OR key = 'route:t'`, keys); n != len(keys)+1 {
		t.Fatalf("%d anchors after %v, want one per chain (%d)", n, steps, len(keys)+1)
	}
	// A reader that sees both the anchors and the entries they stand for
	// finds every chain whole.
	verify("while generation 1 is anchored and not truncated")
	// Generation 2, sealed and past the retention too, is not anchored
	// meanwhile: an anchor stands for all of a chain's entries before it,
	// and generation 1's are still there.
	for range 5 {
		steps = append(steps, step(now, keep))
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM drainer.audit_generations WHERE part = 2 AND anchored_to IS NULL`); n != 1 {
		t.Fatalf("after %v generation 2 was anchored before generation 1 was truncated", steps)
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM drainer.audit WHERE part = 1`); n != inOne {
		t.Fatalf("with the old snapshot open, steps %v left %d of %d entries in generation 1", steps, n, inOne)
	}
	readerSees("after the rotation steps that ran while it was open")
	verify("after those steps")

	// An entry written by hand into the closed generation.
	if _, err := pool.Exec(ctx, `INSERT INTO drainer.audit (key, at, event, actor, prev_hash, hash, part)
	    SELECT 'route:u', s.at, 'operator:resume', 'test', NULL,
	           drainer.audit_hash(NULL, 'route:u', s.at, 'operator:resume', NULL, NULL, NULL, NULL, 'test', NULL, NULL), 1
	      FROM (SELECT clock_timestamp() AS at) s`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	steps = until("generation 1 truncated", now, keep, func() bool {
		return scalar[int](t, pool, `SELECT count(*) FROM drainer.audit_generations WHERE part = 1 AND ready`) == 1
	})
	if !slices.Contains(steps, "anchored 0") {
		t.Fatalf("steps after the reader ended: %v, want the hand-written entry found under the lock (anchored 0) before the truncation", steps)
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM drainer.audit WHERE part = 1`); n != 0 {
		t.Fatalf("%d entries left in the truncated generation", n)
	}
	if n := scalar[int](t, pool, `SELECT count(*) FROM drainer.audit_anchors a WHERE a.key = 'route:u' AND a.hash = drainer.audit_head('route:u')
	                   AND NOT EXISTS (SELECT 1 FROM drainer.audit e WHERE e.key = 'route:u')`); n != 1 {
		t.Fatal("the hand-written entry's hash is not the anchor of its chain")
	}
	verify("after the truncation")

	// New entries on truncated chains link to their anchors.
	if err := st.AuditAppendEach(ctx, pool, []string{"route:u", keys[5]}, "operator:note", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Cancel(ctx, pool, []string{keys[4]}, "operator"); err != nil {
		t.Fatal(err)
	}
	verify("after new entries on truncated chains")

	// A chain edited after the truncation is still caught.
	if _, err := pool.Exec(ctx, `UPDATE drainer.audit SET actor = 'mallory' WHERE key = $1`, keys[4]); err != nil {
		t.Fatal(err)
	}
	broken, err := st.VerifyAudit(ctx, pool, 20)
	if err != nil || len(broken) == 0 {
		t.Fatalf("an edit after the truncation was not reported (%v)", err)
	}
	for _, b := range broken {
		if b.Key != keys[4] {
			t.Fatalf("an edit of %s after the truncation: %v reported", keys[4], broken)
		}
	}
}
