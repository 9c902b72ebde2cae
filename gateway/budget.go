package gateway

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/drainer-io/drainer/store"
)

// The memory of the answers: an answer holds its tool result several times
// while it is read, decoded and written (the row's bytes, the result
// decoded, its JSON), outside the engine's max_in_flight_bytes. The
// results over largeAnswer being answered at once are bounded together
// by answerBudget bytes: such a result is read only once the budget has
// room for it (a read of the row leaves it unread and says its size), and
// the room is given back once the answer is written (answerHold: admit
// gives it back when the SDK has written the response). Smaller results
// are read with their row: at most Config.MaxCalls of them at once.
const (
	largeAnswer  = 64 << 10
	answerBudget = 16 << 20
)

// answerHold holds what a call's answer took of the budget until the
// answer is written. Once done, what is added is given back at once: an
// agent that hangs up ends the request (the SDK returns then) while its
// call's handler may still take room; kept, that room would never come
// back.
type answerHold struct {
	mu      sync.Mutex
	release []func()
	closed  bool
}

type answerHoldKey struct{}

// withAnswerHold returns ctx with a hold of its own; done gives back what
// was taken under it.
func withAnswerHold(ctx context.Context) (context.Context, func()) {
	h := &answerHold{}
	return context.WithValue(ctx, answerHoldKey{}, h), h.done
}

func answerHoldOf(ctx context.Context) *answerHold {
	h, _ := ctx.Value(answerHoldKey{}).(*answerHold)
	return h
}

func (h *answerHold) add(f func()) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		f()
		return
	}
	h.release = append(h.release, f)
	h.mu.Unlock()
}

func (h *answerHold) done() {
	h.mu.Lock()
	fs := h.release
	h.release, h.closed = nil, true
	h.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// errAnswersBusy: the budget had no room for a call's large result
// before its wait ended (or its agent hung up).
var errAnswersBusy = errors.New("the gateway answers as many large results as it holds at once")

// budgeted returns c, a settled row as read (or told), with its whole
// record once answerBudget has room for it, the room held in ctx's
// answerHold until the answer is written; c as it is when its record is
// small. The record left unread is read now, with the row: the row's
// state then answers. errAnswersBusy when no room came before deadline
// or the agent hung up; a failed read's error otherwise.
func (g *Gateway) budgeted(ctx context.Context, c store.Call, deadline time.Time) (store.Call, error) {
	n := max(int64(len(c.Record)), c.RecordBytes)
	if n < largeAnswer {
		return c, nil
	}
	w := min(n, answerBudget)
	actx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if gone := hungUp(ctx); gone != nil {
		go func() {
			select {
			case <-gone:
				cancel()
			case <-actx.Done():
			}
		}()
	}
	if err := g.answers.Acquire(actx, w); err != nil {
		return c, errAnswersBusy
	}
	h := answerHoldOf(ctx)
	if h == nil {
		// Not under admit (a call made in process): given back now.
		defer g.answers.Release(w)
	} else {
		h.add(func() { g.answers.Release(w) })
	}
	if c.Record != nil {
		return c, nil
	}
	return g.read(ctx, c.Key, store.AllRecords)
}
