package drainer

import (
	"sync"
	"time"

	"github.com/drainer-io/drainer/store"
)

// fullPassEvery is how often a claim starts from the first due row rather
// than at the low-water mark.
const fullPassEvery = 2 * time.Second

// fullPassMinGap bounds how often a short claim at the mark triggers a full
// pass: at most one per gap, so a replica does not re-read the due index's
// dead prefix (long while a snapshot holds back vacuum) on every claim.
const fullPassMinGap = 100 * time.Millisecond

// lowWater is the claimer's low-water mark: the last row it claimed, where
// its next claim starts (see store.Position). Only the claim loop uses it.
//
// A row can become due behind the mark: its enqueue (or another replica's
// completion) committed after later rows were claimed. Three things bring
// such rows back into reach:
//   - A notified insert names its first row's position (wakeFloor): the
//     next claim starts there when it lies behind the mark, and goes on
//     from where that claim stopped if it came back full. Rows a sleeping
//     daemon was told of are claimed at once, without a full pass.
//   - A claim at the mark that comes back short (fewer rows than asked) is
//     followed by a full pass (at most one per fullPassMinGap), and a full
//     pass that comes back full with every row behind the old mark by
//     another: rows behind the mark drain at the claim rate, not one batch
//     per fullPassEvery. A full pass that reaches past the mark has claimed
//     everything claimable behind it, and claims return to the mark.
//   - A full pass every fullPassEvery, whatever the claims returned.
type lowWater struct {
	pos      *store.Position
	floor    *store.Position // where the next claim starts, behind pos
	lastFull time.Time
	wasFull  bool // the last claim started from the first due row
	wasFloor bool // the last claim started at floor
	fullNext bool // the next claim starts from the first due row
}

// start returns where claim should start: at the mark; at a notified floor
// behind it; or from the start when a full pass is due (see lowWater), every
// fullPassEvery, and whenever rows may be claimable behind the mark for
// reasons other than their due time (tools left out while their deferral
// runs). A scope's next row of a tool claimed one at a time per scope is
// brought back into reach by the completion that lets it go
// (completer.releaseNext lowers the floor to it). note is what
// notifications said since the last claim.
func (w *lowWater) start(claim store.Claim, note floorNote) *store.Position {
	if note.pos != nil && (w.floor == nil || w.floor.Later(*note.pos)) {
		w.floor = note.pos
	}
	w.wasFloor = false
	if w.pos == nil || note.full || w.fullNext || len(claim.Excluded) > 0 || time.Since(w.lastFull) >= fullPassEvery {
		w.lastFull, w.wasFull, w.fullNext, w.floor = time.Now(), true, false, nil
		return nil
	}
	w.wasFull = false
	if w.floor != nil && w.pos.Later(*w.floor) {
		// Just before the floor's row, so that the claim includes it.
		at := store.Position{Due: w.floor.Due, Seq: w.floor.Seq - 1}
		w.floor, w.wasFloor = nil, true
		return &at
	}
	w.floor = nil
	return w.pos
}

// advance moves the mark past the rows just claimed (asked is how many the
// claim asked for) and decides where the next claim starts.
func (w *lowWater) advance(rows []claimedRow, asked int) {
	old := w.pos
	var last *store.Position // the batch's last row in claim order
	for i := range rows {
		p := store.Position{Due: rows[i].Due, Seq: rows[i].Seq}
		if last == nil || p.Later(*last) {
			last = &p
		}
	}
	if last != nil && (w.pos == nil || last.Later(*w.pos)) {
		w.pos = last
	}
	short := len(rows) < asked
	switch {
	case w.wasFull:
		// More may lie behind the mark only if this pass was full and did
		// not get past it.
		w.fullNext = !short && old != nil && last != nil && old.Later(*last)
	case w.wasFloor:
		// A floor claim that came back full before reaching the mark goes
		// on from its last row.
		if !short && last != nil && old != nil && old.Later(*last) &&
			(w.floor == nil || w.floor.Later(*last)) {
			next := store.Position{Due: last.Due, Seq: last.Seq + 1}
			w.floor = &next
		}
	case short:
		w.fullNext = time.Since(w.lastFull) >= fullPassMinGap
	}
}

// floorNote is what notifications said between two claims: the earliest
// position an insert named, and whether one asked for a full pass.
type floorNote struct {
	pos  *store.Position
	full bool
}

// wakeFloor gathers, for the claim loop, what the listener and the
// engine's other loops learn between claims (see lowWater).
type wakeFloor struct {
	mu   sync.Mutex
	note floorNote
}

// lower records a notified insert's first row.
func (f *wakeFloor) lower(p store.Position) {
	f.mu.Lock()
	if f.note.pos == nil || f.note.pos.Later(p) {
		f.note.pos = &p
	}
	f.mu.Unlock()
}

// wantFull asks for a pass from the first due row: rows became due behind
// the mark without a position (a reclaim, a wake of deferred or newly routed
// rows, a notification without one, a listener that reconnected).
func (f *wakeFloor) wantFull() {
	f.mu.Lock()
	f.note.full = true
	f.mu.Unlock()
}

// take returns what was gathered since the last take and forgets it.
func (f *wakeFloor) take() floorNote {
	f.mu.Lock()
	n := f.note
	f.note = floorNote{}
	f.mu.Unlock()
	return n
}

// putBack returns a note a failed claim did not act on.
func (f *wakeFloor) putBack(n floorNote) {
	if n.pos != nil {
		f.lower(*n.pos)
	}
	if n.full {
		f.wantFull()
	}
}
