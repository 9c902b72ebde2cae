package store_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
)

// TestAnchoringReadsEachEntryBoundedTimes: verifying the chains of one
// audit generation before it is anchored (audit_chain_problems with a
// generation, rotate_audit's anchoring step) reads each entry a bounded
// number of times, however many keys the generation holds and however
// little work_mem the server gives: its keys are joined, not searched
// once per entry. With the search, a generation whose keys outgrew
// work_mem cost entries × keys (a 200,000-entry generation took hours to
// anchor); here 4,000 keys and 64 kB of work_mem make that 16 million rows,
// against about 20 per entry for the join. Both the plan made for the
// generation given and the generic plan rotate_audit may keep.
func TestAnchoringReadsEachEntryBoundedTimes(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	ctx := t.Context()
	const n = 4000
	storetest.Enqueue(t, pool, "run-anchor-cost", "t", n)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	part := scalar[int16](t, conn, `SELECT part FROM drainer.audit_generations WHERE current`)
	if got := scalar[int64](t, conn, `SELECT count(*) FROM drainer.audit WHERE part = $1`, part); got != n {
		t.Fatalf("generation %d holds %d entries, want %d", part, got, n)
	}
	// The statistics an autovacuum would have taken: the plan then knows
	// how many keys the generation holds.
	if _, err := conn.Exec(ctx, `ANALYZE drainer.audit`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SET work_mem = '64kB'`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `PREPARE chain_problems(smallint) AS SELECT count(*) FROM drainer.audit_chain_problems(NULL, $1)`); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		if _, err := conn.Exec(ctx, `SELECT set_config('plan_cache_mode', $1, false)`, mode); err != nil {
			t.Fatal(err)
		}
		var plan []byte
		if err := conn.QueryRow(ctx, fmt.Sprintf(`EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE chain_problems(%d)`, part)).Scan(&plan); err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		work := store.PlanWork(t, plan)
		t.Logf("%s: %.0f rows across the plan for %d entries", mode, work, n)
		if work > 40*n {
			t.Errorf("%s: checking the chains of a generation of %d entries returned %.0f rows across its plan, want at most %d (each entry read a bounded number of times)",
				mode, n, work, 40*n)
		}
	}
}

// TestAnchorsOfARecordReadAlone: digesting the anchor versions of one
// ledger record (audit_anchors_vector: `audit verify` calls it for every
// anchors record of the ledger, each anchoring for its own) reads that
// record's versions, not every anchor ever written. Without the index on
// record each call scanned both tables whole, and a verify cost records ×
// anchors, growing with the square of the history.
func TestAnchorsOfARecordReadAlone(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	ctx := t.Context()
	const records, perRecord = 50, 400
	for _, q := range []string{
		`INSERT INTO drainer.audit_anchors (key, hash, record, row_hash)
		 SELECT 'k' || i, sha256(int4send(i)), i % $1::int, sha256(int4send(i)) FROM generate_series(1, $1::int * $2::int) i`,
		`INSERT INTO drainer.audit_anchor_history (vid, key, hash, record, row_hash, pruned_at)
		 SELECT -i, 'k' || i, sha256(int4send(i)), i % $1::int, sha256(int4send(i)), now() FROM generate_series(1, $1::int * $2::int) i`,
	} {
		if _, err := pool.Exec(ctx, q, records, perRecord); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `ANALYZE drainer.audit_anchors; ANALYZE drainer.audit_anchor_history`); err != nil {
		t.Fatal(err)
	}
	var plan []byte
	if err := pool.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) SELECT * FROM drainer.audit_anchors_vector(7, 64)`).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var read float64
	var walk func(raw json.RawMessage)
	walk = func(raw json.RawMessage) {
		var n struct {
			Rows    float64           `json:"Actual Rows"`
			Removed float64           `json:"Rows Removed by Filter"`
			Loops   float64           `json:"Actual Loops"`
			Rel     string            `json:"Relation Name"`
			Plans   []json.RawMessage `json:"Plans"`
		}
		if err := json.Unmarshal(raw, &n); err != nil {
			t.Fatalf("EXPLAIN node: %v", err)
		}
		if n.Rel == "audit_anchors" || n.Rel == "audit_anchor_history" {
			read += (n.Rows + n.Removed) * n.Loops
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	var doc []struct {
		Plan json.RawMessage `json:"Plan"`
	}
	if err := json.Unmarshal(plan, &doc); err != nil || len(doc) != 1 {
		t.Fatalf("EXPLAIN output: %v: %.200s", err, plan)
	}
	walk(doc[0].Plan)
	t.Logf("%.0f anchor versions read for a record of %d", read, 2*perRecord)
	if read > 4*perRecord {
		t.Errorf("digesting one record's %d anchor versions read %.0f of the %d written, want at most %d",
			2*perRecord, read, 2*records*perRecord, 4*perRecord)
	}
}
