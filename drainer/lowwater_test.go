package drainer

import (
	"testing"
	"time"

	"github.com/drainer-io/drainer/store"
)

// TestLowWaterFullPassAfterShortClaim: a claim at the mark that comes back
// short is followed by a full pass (rows may have become due behind the
// mark), and full passes continue while they come back full; a short full
// pass returns the claimer to the mark.
func TestLowWaterFullPassAfterShortClaim(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	batch := func(from int64, n int) []claimedRow {
		rows := make([]claimedRow, n)
		for i := range rows {
			rows[i] = claimedRow{Seq: from + int64(i), Due: base.Add(time.Duration(from+int64(i)) * time.Millisecond)}
		}
		return rows
	}
	var w lowWater
	claim := store.Claim{Limit: 4}
	// recent pins "the last full pass just ran" with a time in the future,
	// so no check here depends on how fast the machine runs the test.
	recent := func() { w.lastFull = time.Now().Add(time.Hour) }

	if w.start(claim) != nil {
		t.Fatal("the first claim must start from the first due row")
	}
	w.advance(batch(1, 4), 4) // full
	if w.start(claim) != nil {
		t.Fatal("a full pass that came back full must be followed by another full pass")
	}
	recent()
	w.advance(batch(5, 2), 4) // short: everything due behind the mark is claimed
	if p := w.start(claim); p == nil || p.Seq != 6 {
		t.Fatalf("after a short full pass the claim must start at the mark (seq 6), got %+v", p)
	}
	w.advance(batch(7, 4), 4) // full claim at the mark
	if p := w.start(claim); p == nil || p.Seq != 10 {
		t.Fatalf("after a full claim at the mark the next starts at the mark (seq 10), got %+v", p)
	}
	w.lastFull = time.Now().Add(-time.Second) // the last full pass is not recent
	w.advance(batch(11, 1), 4)                // short claim at the mark
	if w.start(claim) != nil {
		t.Fatal("a short claim at the mark must be followed by a full pass")
	}
	recent()
	w.advance(nil, 4) // nothing behind the mark either
	if p := w.start(claim); p == nil || p.Seq != 11 {
		t.Fatalf("after an empty full pass the claim must start at the mark (seq 11), got %+v", p)
	}
	recent()
	w.advance(nil, 4) // short at the mark right after a full pass: no full pass within fullPassMinGap
	if w.fullNext {
		t.Fatalf("a short claim within %s of a full pass must not trigger another", fullPassMinGap)
	}
	if w.start(store.Claim{Limit: 4, Excluded: []string{"t"}}) != nil {
		t.Fatal("a claim that leaves tools out must start from the first due row")
	}
}
