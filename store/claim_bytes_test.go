package store_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
)

// TestClaimBoundedByBytes: a claim with MaxBytes leases, in claim order, the
// rows whose payloads before them sum to less than the bound, and leaves the
// rest pending, counted as withheld; the first row is leased even when it
// alone is larger than the bound. A row's size is its payload's whole size,
// carried on the row from its enqueue; a row without one (queued before
// migration 026) is measured in intents, a payload stored compressed by its
// whole size, not what it takes on disk.
func TestClaimBoundedByBytes(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew(storetest.Schema)
	ctx := t.Context()
	// six rows of ~100 kB each: the first three random-ish (stored
	// uncompressed out of line, or barely compressed), the last three one
	// repeated letter (compressed to a few hundred bytes on disk)
	var ins []store.Intent
	for i := range 6 {
		var blob string
		if i < 3 {
			var b strings.Builder
			for j := 0; b.Len() < 100_000; j++ {
				b.WriteString(strconv.FormatInt(int64(j*7919+i)*2654435761%1000003, 36))
			}
			blob = b.String()
		} else {
			blob = strings.Repeat("x", 100_000)
		}
		ins = append(ins, store.Intent{AgentRunID: "run-bytes", StepID: "s" + strconv.Itoa(i), ToolName: "t",
			Payload: []byte(`{"blob":"` + blob + `"}`)})
	}
	storetest.EnqueueIntents(t, pool, ins)
	if got := scalar[int64](t, pool, `SELECT count(*) FROM drainer.intents WHERE pg_column_compression(payload) IS NOT NULL`); got < 3 {
		t.Fatalf("%d payloads stored compressed, want the 3 repeated ones at least", got)
	}
	claim := func(maxBytes int64, want, withheld int) []store.ClaimedRow {
		t.Helper()
		got, err := st.ClaimBatch(ctx, pool, store.Claim{Limit: 10, Lease: time.Minute, Replica: "r", MaxBytes: maxBytes})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Rows) != want || got.Withheld != withheld {
			t.Fatalf("claim of at most %d bytes: %d rows leased, %d withheld; want %d and %d", maxBytes, len(got.Rows), got.Withheld, want, withheld)
		}
		return got.Rows
	}
	// 250 kB: rows 1-3 (the third starts at 200 kB, under the bound)
	rows := claim(250_000, 3, 3)
	for i, r := range rows {
		if r.StepID != "s"+strconv.Itoa(i) {
			t.Fatalf("row %d leased is %s, want s%d: the claim order", i, r.StepID, i)
		}
	}
	// every row carries its whole size from its enqueue
	if got := scalar[int64](t, pool, `SELECT count(*) FROM drainer.queue WHERE payload_bytes < 100000`); got != 0 {
		t.Fatalf("%d rows carry less than their payload's 100 kB", got)
	}
	// rows queued before their size was carried (migration 026) are
	// measured in intents, compressed ones by their whole text
	if _, err := pool.Exec(ctx, `UPDATE drainer.queue SET payload_bytes = NULL WHERE status = 'pending'`); err != nil {
		t.Fatal(err)
	}
	// 10 kB: one row, though larger than the bound (a compressed one:
	// counted whole, it fills the bound alone)
	rows = claim(10_000, 1, 2)
	if rows[0].StepID != "s3" || len(rows[0].Payload) < 100_000 {
		t.Fatalf("leased %s with %d bytes, want s3 whole", rows[0].StepID, len(rows[0].Payload))
	}
	// no bound: the rest
	claim(0, 2, 0)
	if got := scalar[int64](t, pool, `SELECT count(*) FROM drainer.queue WHERE status = 'pending'`); got != 0 {
		t.Fatalf("%d rows still pending, want none", got)
	}
}
