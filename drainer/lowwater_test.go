package drainer

import (
	"testing"
	"time"

	"github.com/drainer-io/drainer/store"
)

// TestLowWaterFullPassAfterShortClaim: a claim at the mark that comes back
// short is followed by a full pass (rows may have become due behind the
// mark); full passes continue while they come back full without reaching
// past the mark, and claims return to the mark once one reaches past it or
// comes back short.
func TestLowWaterFullPassAfterShortClaim(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// rows returns n claimed rows from seq on, due at base+seq ms; behind
	// returns rows due an hour earlier (committed late, behind any mark).
	rows := func(seq int64, n int) []claimedRow {
		out := make([]claimedRow, n)
		for i := range out {
			s := seq + int64(i)
			out[i] = claimedRow{Seq: s, Due: base.Add(time.Duration(s) * time.Millisecond)}
		}
		return out
	}
	behind := func(seq int64, n int) []claimedRow {
		out := rows(seq, n)
		for i := range out {
			out[i].Due = out[i].Due.Add(-time.Hour)
		}
		return out
	}
	var w lowWater
	claim := store.Claim{Limit: 4}
	// recent pins "the last full pass just ran" with a time in the future,
	// so no check here depends on how fast the machine runs the test.
	recent := func() { w.lastFull = time.Now().Add(time.Hour) }
	atMark := func(step string, seq int64) {
		t.Helper()
		if p := w.start(claim); p == nil || p.Seq != seq {
			t.Fatalf("%s: want a claim at the mark (seq %d), got %+v", step, seq, p)
		}
	}
	fullPass := func(step string) {
		t.Helper()
		if p := w.start(claim); p != nil {
			t.Fatalf("%s: want a full pass, got a claim at %+v", step, p)
		}
		recent()
	}

	fullPass("first claim")
	w.advance(rows(1, 4), 4)
	atMark("after the first pass", 4)
	w.advance(rows(5, 4), 4) // full at the mark
	atMark("after a full claim at the mark", 8)

	w.lastFull = time.Now().Add(-time.Second) // the last full pass is not recent
	w.advance(rows(9, 1), 4)                  // short at the mark
	fullPass("after a short claim at the mark")
	w.advance(behind(100, 4), 4) // full, and all of it behind the mark
	fullPass("after a full pass that stayed behind the mark")
	w.advance(append(behind(104, 2), rows(10, 2)...), 4) // full, reaching past the mark
	atMark("after a full pass that reached past the mark", 11)

	w.lastFull = time.Now().Add(-time.Second)
	w.advance(nil, 4) // short at the mark
	fullPass("after an empty claim at the mark")
	w.advance(behind(106, 1), 4) // short full pass
	atMark("after a short full pass", 11)

	w.advance(nil, 4) // short at the mark right after a full pass
	if w.fullNext {
		t.Fatalf("a short claim within %s of a full pass must not trigger another", fullPassMinGap)
	}
	if w.start(store.Claim{Limit: 4, Excluded: []string{"t"}}) != nil {
		t.Fatal("a claim that leaves tools out must start from the first due row")
	}
}
