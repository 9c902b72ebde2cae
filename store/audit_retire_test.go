package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// sweep runs the audit's rotation until no sweep of forgotten chains'
// anchors is under way (audit_sweep), and returns its steps.
func (b *auditBundle) sweep(t *testing.T) []string {
	t.Helper()
	return b.rotateUntil(t, func() bool {
		return scalar[bool](t, b.pool, `SELECT after_record IS NULL FROM drainer.audit_sweep`)
	})
}

// forgottenAnchors counts the anchor versions (current and older) of
// forgotten chains: keys with no row, no tombstone and no entry left.
func forgottenAnchors(t *testing.T, b *auditBundle) int64 {
	t.Helper()
	return scalar[int64](t, b.pool, `SELECT count(*)
	    FROM (SELECT key FROM drainer.audit_anchors UNION ALL SELECT key FROM drainer.audit_anchor_history) v
	   WHERE drainer.audit_chain_forgotten(v.key)`)
}

func hasAnchor(t *testing.T, b *auditBundle, key string) bool {
	t.Helper()
	return scalar[bool](t, b.pool, `SELECT EXISTS (SELECT 1 FROM drainer.audit_anchors WHERE key = $1)`, key)
}

func verifiesClean(t *testing.T, b *auditBundle, when string) {
	t.Helper()
	broken, err := b.st.VerifyAudit(context.Background(), b.pool, 1000)
	if err != nil || len(broken) != 0 {
		t.Fatalf("audit verify %s: %v %v", when, broken, err)
	}
}

// TestForgottenChainsLoseTheirAnchors: the anchors grow with the chains
// that can still be extended or checked, not with every key ever pruned.
// Once a truncation's sweep has run, no anchor version is left of a chain
// whose key has no row, no tombstone and no entry; the chains of rows and
// tombstones keep theirs; `audit verify` finds nothing wrong before,
// between and after, and the ledger holds a 'retired' record for each
// anchors record that lost versions. A key enqueued again after its
// anchor went starts its chain again, and verifies.
func TestForgottenChainsLoseTheirAnchors(t *testing.T) {
	t.Parallel()
	b := newAuditBundle(t)
	b.prune(t) // keys[0] and keys[1] succeeded: tombstones
	b.rotateAway(t)
	verifiesClean(t, b, "after the rotation")
	steps := b.sweep(t)
	verifiesClean(t, b, "after the first sweep")
	if n := forgottenAnchors(t, b); n != 0 {
		t.Fatalf("after the sweep %v: %d anchor versions of forgotten chains", steps, n)
	}
	// route:t (an operator's note: no row, no tombstone) is forgotten; the
	// rows and tombstones keep their chains' anchors.
	if hasAnchor(t, b, "route:t") {
		t.Fatalf("route:t keeps its anchor after the sweep %v", steps)
	}
	for _, k := range b.keys {
		if !hasAnchor(t, b, k) {
			t.Fatalf("%s lost its anchor, though it has a row or a tombstone", k)
		}
	}

	// The tombstones' age passes: their chains are forgotten, and go with
	// the sweep of the next truncation.
	b.pruneKeeping(t, 0)
	if n := forgottenAnchors(t, b); n != 2 {
		t.Fatalf("%d forgotten chains with anchors once the tombstones went, want 2", n)
	}
	verifiesClean(t, b, "with the tombstones gone")
	storetest.Enqueue(t, b.pool, "run2", "t", 2)
	b.rotateAway(t)
	b.sweep(t)
	verifiesClean(t, b, "after the second sweep")
	if n := forgottenAnchors(t, b); n != 0 {
		t.Fatalf("after the second sweep: %d anchor versions of forgotten chains", n)
	}
	if hasAnchor(t, b, b.keys[0]) || hasAnchor(t, b, b.keys[1]) {
		t.Fatal("a forgotten chain keeps its anchor after the second sweep")
	}
	if n := scalar[int64](t, b.pool, `SELECT count(*) FROM drainer.audit_ledger WHERE kind = 'retired'`); n != 2 {
		t.Fatalf("%d retired records, want one a sweep", n)
	}

	// The same tuple again: a new chain, from nothing, that verifies; and
	// through the single enqueue, whose head is audit_head's.
	again := storetest.Enqueue(t, b.pool, "run", "t", 1)
	if again[0] != b.keys[0] {
		t.Fatalf("the same tuple has key %s, want %s", again[0], b.keys[0])
	}
	if _, err := b.pool.Exec(context.Background(), `SELECT drainer.enqueue('run', 'step-1', 't', '', '{"i": 1}')`); err != nil {
		t.Fatal(err)
	}
	verifiesClean(t, b, "after the forgotten keys were enqueued again")
	b.prune(t)
	b.rotateAway(t)
	b.sweep(t)
	verifiesClean(t, b, "after their turn")
}

// TestRetiringKeepsTheEvidence: a sweep removes nothing that audit verify
// reports. An anchor deleted by hand leaves its record as it is (the other
// forgotten chains of that record keep their anchors, and the deletion is
// still reported after the sweep); an anchor whose content was edited
// (its hash not recomputed) stays, reported, while the record's other
// forgotten chains go.
func TestRetiringKeepsTheEvidence(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		tamper    func(t *testing.T, b *auditBundle)
		want      string
		routeLeft bool // route:t's anchor is left
	}{
		// the chain is gone with its anchor: its record no longer matches
		// (naming the chains left in the bucket)
		{"deleted", func(t *testing.T, b *auditBundle) { storetest.TamperAnchor(t, b.pool, b.keys[0]) }, "no longer match", true},
		{"edited", func(t *testing.T, b *auditBundle) {
			if _, err := b.pool.Exec(context.Background(), `UPDATE drainer.audit_anchors SET status = 'failed' WHERE key = $1`, b.keys[0]); err != nil {
				t.Fatal(err)
			}
		}, "edited", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := newAuditBundle(t)
			b.pruneKeeping(t, 0) // keys[0] and keys[1] pruned, their tombstones forgotten
			b.rotateAway(t)      // anchored and truncated; the sweep is still to come
			if scalar[bool](t, b.pool, `SELECT after_record IS NULL FROM drainer.audit_sweep`) {
				t.Fatal("no sweep under way after the truncation")
			}
			c.tamper(t, b)
			blame := b.keys[0]
			if c.name == "deleted" {
				blame = "" // any chain of the record's bucket
			}
			b.reported(t, "right after", blame, c.want)
			b.sweep(t)
			b.reported(t, "after the sweep", blame, c.want)
			if got := hasAnchor(t, b, "route:t"); got != c.routeLeft {
				t.Fatalf("route:t has an anchor: %v, want %v", got, c.routeLeft)
			}
			if c.name == "edited" && !hasAnchor(t, b, b.keys[0]) {
				t.Fatal("the edited anchor was retired")
			}
			// Another turn and its sweep: still reported.
			storetest.Enqueue(t, b.pool, "run2", "t", 1)
			b.rotateAway(t)
			b.sweep(t)
			b.reported(t, "after another turn", blame, c.want)
		})
	}
}

// forgottenKey is a bundle whose keys[0] is forgotten (row pruned,
// tombstone gone, entries truncated) with its anchor left, and a sweep
// to come.
func forgottenKey(t *testing.T) *auditBundle {
	t.Helper()
	b := newAuditBundle(t)
	b.pruneKeeping(t, 0)
	b.rotateAway(t)
	if !hasAnchor(t, b, b.keys[0]) {
		t.Fatal("keys[0] has no anchor before the sweep")
	}
	return b
}

// TestRetirementKeepsTheAnchorANewEntryLinksTo: an enqueue of a forgotten
// key links its first entry to the chain's anchor, which it reads FOR KEY
// SHARE (drainer.enqueue through audit_head, enqueue_batch inline). A
// sweep that runs while such an enqueue is open keeps the anchor; an
// enqueue that comes while a sweep has removed it, uncommitted, waits and
// starts the chain from nothing; one under REPEATABLE READ whose snapshot
// still sees a removed anchor fails to serialize, and succeeds when tried
// again. audit verify finds every chain whole, each way.
func TestRetirementKeepsTheAnchorANewEntryLinksTo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := store.MustNew(storetest.Schema)
	for _, e := range []struct {
		name    string
		enqueue func(db store.DB) error
	}{
		{"enqueue", func(db store.DB) error {
			_, err := db.Exec(ctx, `SELECT drainer.enqueue('run', 'step-0', 't', '', '{"i": 0}')`)
			return err
		}},
		{"enqueue_batch", func(db store.DB) error {
			_, err := st.EnqueueBatch(ctx, db, []store.Intent{{AgentRunID: "run", StepID: "step-0", ToolName: "t", Payload: []byte(`{"i":0}`)}})
			return err
		}},
	} {
		t.Run(e.name+", enqueue first", func(t *testing.T) {
			t.Parallel()
			b := forgottenKey(t)
			tx, err := b.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if err := e.enqueue(tx); err != nil {
				t.Fatal(err)
			}
			b.sweep(t)
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if !hasAnchor(t, b, b.keys[0]) {
				t.Fatal("the sweep removed the anchor an open enqueue linked to")
			}
			verifiesClean(t, b, "after the enqueue")
		})

		t.Run(e.name+", sweep first", func(t *testing.T) {
			t.Parallel()
			b := forgottenKey(t)
			sw, err := b.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer sw.Rollback(ctx)
			for steps := 0; anchorIn(t, sw, b.keys[0]); steps++ {
				var step string
				if err := sw.QueryRow(ctx, `SELECT drainer.rotate_audit(interval '0', interval '0')`).Scan(&step); err != nil {
					t.Fatal(err)
				}
				if step == "idle" || steps > 50 {
					t.Fatalf("the rotation is %s after %d steps, the anchor of %s left", step, steps, b.keys[0])
				}
			}
			done := make(chan error, 1)
			go func() { done <- e.enqueue(b.pool) }()
			select {
			case err := <-done:
				t.Fatalf("the enqueue did not wait for the sweep that removed its anchor: %v", err)
			case <-time.After(200 * time.Millisecond):
			}
			if err := sw.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			verifiesClean(t, b, "after the enqueue")
		})

		t.Run(e.name+", repeatable read", func(t *testing.T) {
			t.Parallel()
			b := forgottenKey(t)
			tx, err := b.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if !anchorIn(t, tx, b.keys[0]) { // the snapshot is taken
				t.Fatal("no anchor in the producer's snapshot")
			}
			b.sweep(t)
			if hasAnchor(t, b, b.keys[0]) {
				t.Fatal("the sweep kept the anchor of a forgotten chain")
			}
			err = e.enqueue(tx)
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "40001" {
				t.Fatalf("an enqueue whose snapshot still sees a removed anchor: %v, want a serialization failure", err)
			}
			_ = tx.Rollback(ctx)
			if err := e.enqueue(b.pool); err != nil {
				t.Fatal(err)
			}
			verifiesClean(t, b, "after the enqueue tried again")
		})
	}
}

// anchorIn says whether key has an anchor as tx sees it.
func anchorIn(t *testing.T, tx pgx.Tx, key string) bool {
	t.Helper()
	var got bool
	if err := tx.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM drainer.audit_anchors WHERE key = $1)`, key).Scan(&got); err != nil {
		t.Fatal(err)
	}
	return got
}
