package drainer

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/drainer-io/drainer/store"
	"github.com/prometheus/client_golang/prometheus"
)

// claimCause is why the claim loop ran a claim. Every row a claim leases is
// counted under the cause of the loop's wake-up that led to it (the claims
// that follow a full one, and the claim right after arming the wake gate,
// share it): ClaimedRows, drainer_claimed_rows_total{cause}, and bench's
// latency_poll_pickups, the rows of its light-load phase claimed by a poll
// (docs/reference.md §7 and §8). The rows a poll claimed wait a moment
// before they are counted (pollWitness): a notification that names them
// meanwhile shows the wake-up had not missed them.
type claimCause uint8

const (
	causeStart  claimCause = iota // the engine started
	causeNotify                   // a producer's notification: the wake-up worked
	causeRearm                    // the wake-up was re-armed (listener or gate connection back): notifications may have been lost
	causeSignal                   // another loop: a reload, a deferral's wake, a reclaim, queued compensations
	causeSlots                    // worker slots freed while the loop waited for them (refill)
	causeRetry                    // the loop's own timers: an owed full pass, a gate still arming, a retry this engine scheduled coming due (retryWakes)
	causePoll                     // the poll timer, and no notification named these rows within pollWitnessWait: the wake-up missed them
	numCauses
)

// causeNames are the label values of drainer_claimed_rows_total, by cause.
var causeNames = [numCauses]string{"start", "notify", "rearm", "signal", "slots", "retry", "poll"}

func (c claimCause) String() string { return causeNames[c] }

// claimCounts counts claimed rows by cause.
type claimCounts [numCauses]atomic.Uint64

func (c *claimCounts) add(cause claimCause, rows int) {
	if rows > 0 {
		c[cause].Add(uint64(rows))
	}
}

// ClaimedRows returns how many rows this engine has claimed, by why the
// claim ran: "notify" (a producer's notification), "rearm" (the wake-up's
// connections came back), "slots" (worker slots freed), "signal" (another
// loop of the engine), "retry", "start", and "poll": the rows the wake-up
// missed, found by the poll timer.
func (e *Engine) ClaimedRows() map[string]uint64 {
	e.witness.settle(time.Now(), &e.claims)
	out := make(map[string]uint64, numCauses)
	for c := range numCauses {
		out[causeNames[c]] = e.claims[c].Load()
	}
	return out
}

// wakeFor wakes the claim loop and tells it why: the next claim counts
// under the most telling cause given since the loop last woke.
func (e *Engine) wakeFor(c claimCause) {
	e.wakeWhy.Or(1 << c)
	e.signal()
}

// takeWakeCause returns the cause of the claims the loop is about to run:
// the first given by wakeFor since it last asked, in the order of the
// causes (a notification first), or else what woke it (fallback).
func (e *Engine) takeWakeCause(fallback claimCause) claimCause {
	why := e.wakeWhy.Swap(0)
	for c := range numCauses {
		if why&(1<<c) != 0 {
			return c
		}
	}
	return fallback
}

// ClaimCollector exports ClaimedRows as drainer_claimed_rows_total{cause},
// every cause from startup. Register it once on the registry of the
// engine's Metrics.
func (e *Engine) ClaimCollector() prometheus.Collector {
	return &claimCollector{e: e, desc: prometheus.NewDesc("drainer_claimed_rows_total",
		"Rows claimed, by why the claim ran: notify (a producer's notification), poll (the poll timer, with no notification for them within 1 s: the wake-up missed them), slots, rearm, signal, retry, start.",
		[]string{"cause"}, nil)}
}

type claimCollector struct {
	e    *Engine
	desc *prometheus.Desc
}

func (c *claimCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *claimCollector) Collect(ch chan<- prometheus.Metric) {
	c.e.witness.settle(time.Now(), &c.e.claims)
	for cause := range numCauses {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(c.e.claims[cause].Load()), causeNames[cause])
	}
}

// pollWitnessWait is how long the rows a poll claimed wait for their
// notification before they count under poll. A row's commit is visible to
// claims a moment before its notification reaches the listener: a poll
// that fires in between claims rows the wake-up was about to deliver.
// Measured: every poll pickup of bench's light-load phase was named by a
// notification 0.1 to 4 ms after its claim; on a 2-core machine running
// several test suites, the wake-up another replica sends when a deferral
// ends came up to some hundreds of milliseconds after a poll claimed its
// rows. A second keeps the count about the wake-up, not the machine's
// load: a row the wake-up missed gets no notification at all.
const pollWitnessWait = time.Second

// maxHeard bounds the notifications the witness remembers (those of the
// last pollWitnessWait), and the rows it holds: past it the oldest
// notifications are forgotten (a row only they named counts under poll),
// and the oldest rows count under poll before their wait is over.
const maxHeard = 4096

// pollWitness decides which cause the rows a poll claimed count under. It
// holds them for pollWitnessWait; a notification heard in that time, or
// in the pollWitnessWait before they were claimed, that names their
// statement (the first row a producer's statement inserted: the same due
// time, which is its transaction's, and a sequence number at most theirs)
// moves them to notify, and a notification without a position moves every
// row held. The rest count under poll once their wait is over, or when the
// engine stops. Counts only ever grow: a row is counted once, when
// settled.
type pollWitness struct {
	mu    sync.Mutex
	held  []witnessed // claimed by a poll, not counted yet; in claim order
	heard []witnessed // notifications of the last pollWitnessWait, oldest first
}

// witnessed is a row a poll claimed, or a notification's position (all: it
// had none).
type witnessed struct {
	at  time.Time
	due int64 // microseconds since the epoch
	seq int64
	all bool
}

// names reports whether notification n names row r.
func (n witnessed) names(r witnessed) bool {
	return n.all || n.due == r.due && n.seq <= r.seq
}

// hold takes the rows of a poll's claim made at claimedAt, now. Those a
// notification heard already names count under notify at once.
func (w *pollWitness) hold(rows []store.ClaimedRow, claimedAt, now time.Time, counts *claimCounts) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.settleLocked(now, counts)
	named := 0
	for i := range rows {
		r := witnessed{at: claimedAt, due: rows[i].Due.UnixMicro(), seq: rows[i].Seq}
		if w.namedLocked(r) {
			named++
			continue
		}
		w.held = append(w.held, r)
	}
	counts.add(causeNotify, named)
	if over := len(w.held) - maxHeard; over > 0 {
		counts.add(causePoll, over) // the oldest, without their full wait
		w.held = append(w.held[:0], w.held[over:]...)
	}
}

func (w *pollWitness) namedLocked(r witnessed) bool {
	for _, n := range w.heard {
		if n.names(r) {
			return true
		}
	}
	return false
}

// heardOf records a notification heard now and moves the held rows it
// names to notify. ok is false for a notification without a position.
func (w *pollWitness) heardOf(p store.Position, ok bool, now time.Time, counts *claimCounts) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.settleLocked(now, counts)
	n := witnessed{at: now, due: p.Due.UnixMicro(), seq: p.Seq, all: !ok}
	if len(w.heard) >= maxHeard {
		w.heard = append(w.heard[:0], w.heard[len(w.heard)-maxHeard+1:]...)
	}
	w.heard = append(w.heard, n)
	kept := w.held[:0]
	for _, r := range w.held {
		if n.names(r) {
			counts.add(causeNotify, 1)
			continue
		}
		kept = append(kept, r)
	}
	w.held = kept
}

// settle counts under poll the held rows whose wait is over, and forgets
// the notifications too old to name a row still to come.
func (w *pollWitness) settle(now time.Time, counts *claimCounts) {
	w.mu.Lock()
	w.settleLocked(now, counts)
	w.mu.Unlock()
}

func (w *pollWitness) settleLocked(now time.Time, counts *claimCounts) {
	i := 0
	for i < len(w.held) && now.Sub(w.held[i].at) >= pollWitnessWait {
		i++
	}
	counts.add(causePoll, i)
	w.held = append(w.held[:0], w.held[i:]...)
	j := 0
	for j < len(w.heard) && now.Sub(w.heard[j].at) >= pollWitnessWait {
		j++
	}
	w.heard = append(w.heard[:0], w.heard[j:]...)
}

// settleAll counts every held row under poll: the engine stopped, and no
// notification will come.
func (w *pollWitness) settleAll(counts *claimCounts) {
	w.mu.Lock()
	counts.add(causePoll, len(w.held))
	w.held, w.heard = nil, nil
	w.mu.Unlock()
}

// signalFull wakes the claim loop for rows that became due behind its
// low-water mark without a position: its next claim starts from the first
// due row.
func (e *Engine) signalFull() {
	e.floor.wantFull()
	e.wakeFor(causeSignal)
}

// signal wakes the claim loop without blocking.
func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}
