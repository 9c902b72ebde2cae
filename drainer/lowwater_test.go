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
	t.Parallel()
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
		if p := w.start(claim, floorNote{}); p == nil || p.Seq != seq {
			t.Fatalf("%s: want a claim at the mark (seq %d), got %+v", step, seq, p)
		}
	}
	fullPass := func(step string) {
		t.Helper()
		if p := w.start(claim, floorNote{}); p != nil {
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
	if w.start(store.Claim{Limit: 4, Excluded: []string{"t"}}, floorNote{}) != nil {
		t.Fatal("a claim that leaves tools out must start from the first due row")
	}
}

// TestLowWaterFloor: a notified position behind the mark makes the next
// claim start just before it (including it), a floor claim that comes back
// full before reaching the mark goes on from its last row, and claims then
// return to the mark. A floor ahead of the mark changes nothing; a note
// that asks for a full pass gets one.
func TestLowWaterFloor(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pos := func(ms, seq int64) store.Position {
		return store.Position{Due: base.Add(time.Duration(ms) * time.Millisecond), Seq: seq}
	}
	row := func(ms, seq int64) claimedRow {
		p := pos(ms, seq)
		return claimedRow{Seq: p.Seq, Due: p.Due}
	}
	claim := store.Claim{Limit: 2}
	w := lowWater{lastFull: time.Now().Add(time.Hour)} // no periodic full pass in this test
	w.pos = new(pos(100, 50))
	want := func(step string, got *store.Position, wantPos store.Position) {
		t.Helper()
		if got == nil || !got.Due.Equal(wantPos.Due) || got.Seq != wantPos.Seq {
			t.Fatalf("%s: want a claim after %+v, got %+v", step, wantPos, got)
		}
	}

	// Ahead of the mark: the claim starts at the mark.
	want("floor ahead of the mark", w.start(claim, floorNote{pos: new(pos(200, 60))}), pos(100, 50))
	w.advance(nil, 2)
	w.lastFull = time.Now().Add(time.Hour)
	w.fullNext = false

	// Behind the mark: just before the floor's row.
	want("floor behind the mark", w.start(claim, floorNote{pos: new(pos(40, 45))}), pos(40, 44))
	w.advance([]claimedRow{row(40, 45), row(41, 46)}, 2) // full, still behind the mark
	want("a full floor claim goes on", w.start(claim, floorNote{}), pos(41, 46))
	w.advance([]claimedRow{row(42, 47)}, 2) // short: everything from the floor on is claimed
	want("back at the mark", w.start(claim, floorNote{}), pos(100, 50))
	w.advance(nil, 2)
	w.lastFull = time.Now().Add(time.Hour)
	w.fullNext = false

	// The earlier of a pending floor and a new note wins.
	w.floor = new(pos(30, 40))
	want("earliest floor", w.start(claim, floorNote{pos: new(pos(35, 42))}), pos(30, 39))
	w.advance(nil, 2)
	w.lastFull = time.Now().Add(time.Hour)
	w.fullNext = false

	if p := w.start(claim, floorNote{pos: new(pos(40, 45)), full: true}); p != nil {
		t.Fatalf("a note asking for a full pass: want a claim from the first due row, got one after %+v", p)
	}
	if w.floor != nil {
		t.Fatalf("a full pass must drop the floor it covers, kept %+v", w.floor)
	}
}
