package kafka

import (
	"fmt"
	"sync"

	"github.com/drainer-io/drainer/dispatch"
)

// ackLogSize bounds the acknowledgements remembered: the oldest is
// forgotten first.
const ackLogSize = 1 << 16

// ackLog remembers the keys acknowledged in this process (where their
// record went, and a digest of the payload) and the keys being produced
// now. Kafka's idempotent producer only removes the duplicates of its own
// retries within one producer session; this removes the second copy that a
// row sent again to the same process would otherwise write (an engine
// retry after an attempt that timed out but was acknowledged later, a
// reclaim). It is in memory only: a restarted process, or another replica,
// may still write a copy, which consumers drop by its Idempotency-Key.
type ackLog struct {
	mu       sync.Mutex
	acked    map[string]ackEntry
	order    []string // FIFO of acked keys, a ring of cap entries
	next     int
	inFlight map[string]bool
}

type ackEntry struct {
	sum [32]byte
	at  ack
}

func newAckLog(capacity int) *ackLog {
	return &ackLog{acked: make(map[string]ackEntry, capacity), order: make([]string, capacity), inFlight: map[string]bool{}}
}

// begin marks key in flight and returns false, or returns the answer for a
// key acknowledged before (a Replay, or a Terminal payload mismatch) or
// being produced now (a Retry), and true.
func (l *ackLog) begin(key string, sum [32]byte) (dispatch.Result, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.acked[key]; ok {
		if e.sum != sum {
			return dispatch.Result{Outcome: dispatch.Terminal, NotSent: true, Reason: dispatch.ReasonPayloadMismatch,
				Err: fmt.Errorf("this key was written to topic %s (partition %d, offset %d) with another payload", e.at.Topic, e.at.Partition, e.at.Offset)}, true
		}
		return dispatch.Result{Outcome: dispatch.Replay, Reason: dispatch.ReasonReplay, Response: e.at.JSON()}, true
	}
	if l.inFlight[key] {
		return dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Reason: ReasonInFlight,
			Err: fmt.Errorf("a record with this key is still waiting for its acknowledgement (not sent again)")}, true
	}
	l.inFlight[key] = true
	return dispatch.Result{}, false
}

// done records key's acknowledgement.
func (l *ackLog) done(key string, sum [32]byte, at ack) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.inFlight, key)
	if _, ok := l.acked[key]; ok {
		return
	}
	if old := l.order[l.next]; old != "" {
		delete(l.acked, old)
	}
	l.order[l.next] = key
	l.next = (l.next + 1) % len(l.order)
	l.acked[key] = ackEntry{sum: sum, at: at}
}

// abandon forgets that key is in flight.
func (l *ackLog) abandon(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.inFlight, key)
}
