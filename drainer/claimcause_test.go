package drainer

import (
	"testing"
	"time"

	"github.com/drainer-io/drainer/store"
)

// TestPollWitness: the rows a poll claimed count under notify when a
// notification names their statement within pollWitnessWait of the claim,
// before or after it, and under poll otherwise: once their wait is over,
// or when the engine stops. No row is counted twice or lost. The clock is
// the test's (t0, then t0 + the wait): a verdict never depends on how fast
// the machine runs it.
func TestPollWitness(t *testing.T) {
	t.Parallel()
	due := time.Date(2026, 11, 27, 1, 0, 0, 123456000, time.UTC)
	t0 := time.Now()
	t1 := t0.Add(pollWitnessWait)
	row := func(d time.Time, seq int64) store.ClaimedRow { return store.ClaimedRow{Due: d, Seq: seq} }
	pos := func(d time.Time, seq int64) store.Position { return store.Position{Due: d, Seq: seq} }
	counts := func(c *claimCounts) (notify, poll uint64) { return c[causeNotify].Load(), c[causePoll].Load() }
	want := func(t *testing.T, c *claimCounts, notify, poll uint64) {
		t.Helper()
		if n, p := counts(c); n != notify || p != poll {
			t.Fatalf("notify %d, poll %d; want %d, %d", n, p, notify, poll)
		}
	}

	t.Run("named after the claim", func(t *testing.T) {
		var w pollWitness
		var c claimCounts
		// Rows 10 and 11 of one statement, 12 of another transaction.
		w.hold([]store.ClaimedRow{row(due, 10), row(due, 11), row(due.Add(time.Microsecond), 12)}, t0, t0, &c)
		want(t, &c, 0, 0)
		w.heardOf(pos(due, 10), true, t0, &c)
		want(t, &c, 2, 0)
		// A later row of the same due time is not named by a position after it.
		w.heardOf(pos(due.Add(time.Microsecond), 13), true, t0, &c)
		want(t, &c, 2, 0)
		w.settle(t1, &c)
		want(t, &c, 2, 1)
		// A notification after the wait changes nothing.
		w.heardOf(pos(due.Add(time.Microsecond), 12), true, t1, &c)
		w.settleAll(&c)
		want(t, &c, 2, 1)
	})

	t.Run("named before the claim", func(t *testing.T) {
		var w pollWitness
		var c claimCounts
		w.heardOf(pos(due, 7), true, t0, &c)
		w.hold([]store.ClaimedRow{row(due, 7), row(due, 8), row(due, 6)}, t0, t0, &c)
		want(t, &c, 2, 0) // row 6 lies before the position named
		w.settleAll(&c)
		want(t, &c, 2, 1)
	})

	t.Run("a notification without a position names every row held", func(t *testing.T) {
		var w pollWitness
		var c claimCounts
		w.hold([]store.ClaimedRow{row(due, 1), row(due.Add(time.Second), 2)}, t0, t0, &c)
		w.heardOf(store.Position{}, false, t0, &c)
		want(t, &c, 2, 0)
	})

	t.Run("old notifications are forgotten, held rows settle in order", func(t *testing.T) {
		var w pollWitness
		var c claimCounts
		w.heardOf(pos(due, 1), true, t0, &c)
		w.settle(t1, &c)
		if len(w.heard) != 0 {
			t.Fatalf("%d notifications kept past their wait", len(w.heard))
		}
		w.hold([]store.ClaimedRow{row(due, 1)}, t0, t1, &c) // its wait is over, and the old notification forgotten
		w.hold([]store.ClaimedRow{row(due, 2)}, t1, t1, &c)
		w.settle(t1, &c)
		want(t, &c, 0, 1)
		if len(w.held) != 1 {
			t.Fatalf("%d rows held, want 1", len(w.held))
		}
	})

	t.Run("what it holds is bounded", func(t *testing.T) {
		var w pollWitness
		var c claimCounts
		for i := range maxHeard + 10 {
			w.heardOf(pos(due, int64(i)), true, t0, &c)
		}
		if len(w.heard) != maxHeard {
			t.Fatalf("%d notifications remembered, want %d", len(w.heard), maxHeard)
		}
		rows := make([]store.ClaimedRow, maxHeard+5)
		for i := range rows {
			rows[i] = row(due.Add(time.Hour), int64(i)) // named by none
		}
		w.hold(rows, t0, t0, &c)
		want(t, &c, 0, 5)
		if len(w.held) != maxHeard || w.held[0].seq != 5 {
			t.Fatalf("%d rows held from %d, want %d from 5", len(w.held), w.held[0].seq, maxHeard)
		}
	})
}
