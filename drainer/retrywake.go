package drainer

import (
	"slices"
	"sync"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
)

// The timers that wake the claim loop for the retries this engine
// scheduled.
const (
	// retryWakeBucket groups the retries coming due together: one timer,
	// one claim, for every retry due within the same 10 ms.
	retryWakeBucket = 10 * time.Millisecond
	// retryWakeMax: a retry due later than this is left to the poll, which
	// finds it within a poll interval or two of a wait this long.
	retryWakeMax = time.Minute
	// retryWakeTimers bounds the timers pending at once; past it, retries
	// are left to the poll.
	retryWakeTimers = 1024
)

// retryWakes wakes the claim loop when a row this engine rescheduled after
// a failed attempt comes due, from the earliest position the row can hold
// in the claim order, so that the retry goes out when its backoff (Full
// Jitter, floored by Retry-After) says, rather than at the next poll: the
// poll would also gather the retries of many rows into the same tick,
// which is what the jitter spreads apart. The same goes for a row its
// adapter's gate turned away (completion.wakeWhenDue), due when the gate
// may let it through: a slot or a rate token (few are turned away for
// those: they wait in their workers first, gate.waitSlot,
// Config.GateWait), the breaker's next probe, an auth hold's recheck. The
// other rows of its tool the deferrer pushed back meanwhile are woken at
// once when the recheck's answer closes the breaker or ends the hold
// (gate.free). A retry whose row another replica claims first finds
// nothing.
//
// A gate's state is its replica's own: another replica's breaker may be
// closed, its credentials not held, its slots free. So a turned-away row
// coming due wakes every replica (one notification per timer), not only
// this one; otherwise a replica whose gate is open would find it by its
// poll, up to a poll interval late, whenever it looks before this one.
type retryWakes struct {
	e *Engine

	mu      sync.Mutex
	timers  map[int64]*retryTimer // by the bucket the timer fires in
	stopped bool
}

type retryTimer struct {
	t     *time.Timer
	floor store.Position // the earliest position of the rows it wakes for
	all   bool           // a row it wakes for was turned away by this replica's gate, or its credentials refused: wake every replica
}

// schedule sets the timers for the retries of batch, just written: a
// completion not lost to its fence, that keeps the row pending with a
// delay after an attempt, or after its gate's refusal.
func (w *retryWakes) schedule(d store.Completed, batch []completion) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	for i := range batch {
		x := &batch[i]
		if x.row == nil || x.Status != outbox.StatusPending || (x.GiveBack && !x.wakeWhenDue) || x.KeepNext || x.Delay <= 0 || x.Delay > retryWakeMax || slices.Contains(d.Lost, x.Seq) {
			continue
		}
		// The row is due at the completion's now() plus Delay on the
		// database clock: no earlier than the claim's now() plus Delay
		// (its floor in the claim order), and no later, on this process's
		// clock, than now plus Delay (the timer).
		floor := store.Position{Due: x.row.DBNow.Add(x.Delay)}
		bucket := (now.Add(x.Delay).UnixNano() + int64(retryWakeBucket) - 1) / int64(retryWakeBucket)
		if t := w.timers[bucket]; t != nil {
			if t.floor.Later(floor) {
				t.floor = floor
			}
			t.all = t.all || x.wakeWhenDue
			continue
		}
		if len(w.timers) >= retryWakeTimers {
			continue // left to the poll
		}
		t := &retryTimer{floor: floor, all: x.wakeWhenDue}
		fireAt := time.Unix(0, bucket*int64(retryWakeBucket))
		t.t = time.AfterFunc(time.Until(fireAt), func() { w.fire(bucket) })
		w.timers[bucket] = t
	}
}

func (w *retryWakes) fire(bucket int64) {
	w.mu.Lock()
	t := w.timers[bucket]
	delete(w.timers, bucket)
	w.mu.Unlock()
	if t == nil {
		return
	}
	w.e.floor.lower(t.floor)
	w.e.wakeFor(causeRetry)
	if t.all {
		w.e.wakeAll(w.e.fetchCtx, "rows a gate turned away came due")
	}
}

// stop stops every timer: the engine no longer claims.
func (w *retryWakes) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	for b, t := range w.timers {
		t.t.Stop()
		delete(w.timers, b)
	}
}
