package mcp

import (
	"context"
	"fmt"
	"io"
)

// The adapter's budget for large answers: a tools/call answer may be up to
// Config.MessageLimit (16 MiB by default), and classifying it holds it a
// few times over (the body, the result, its content, its record). Every
// worker of the engine may be reading one, so without a budget a replica's
// memory grew with its workers times the limit. An answer is read freely
// up to largeAnswer; past it, the call must hold one of the adapter's
// large-answer slots, AnswerBudget / MessageLimit of them (at least one),
// until its Dispatch returns. A call that finds none free waits for one
// within its attempt's deadline.

// largeAnswer is how much of an answer is read without a slot.
const largeAnswer = 256 << 10

// DefaultAnswerBudget is Config.AnswerBudget's default: four answers of the
// default MessageLimit at once.
const DefaultAnswerBudget = 64 << 20

// largeSlots is how many large answers cfg's adapter reads at once.
func largeSlots(cfg Config) int { return max(1, cfg.AnswerBudget/cfg.MessageLimit) }

// answerHold is one tools/call's claim on its adapter's large-answer
// slots: none until its answer grows past largeAnswer.
type answerHold struct {
	a    *Adapter
	held bool
}

// reader returns r, read within the hold: past largeAnswer bytes, a read
// first takes a slot (waiting for one until ctx ends). A nil hold reads r
// as it is.
func (h *answerHold) reader(ctx context.Context, r io.Reader) io.Reader {
	if h == nil {
		return r
	}
	return &heldReader{ctx: ctx, r: r, h: h}
}

// release gives back the slot the hold took, if it took one.
func (h *answerHold) release() {
	if h.held {
		h.held = false
		<-h.a.large
	}
}

func (h *answerHold) take(ctx context.Context) error {
	h.a.largeWaiting.Add(1)
	defer h.a.largeWaiting.Add(-1)
	select {
	case h.a.large <- struct{}{}:
		h.held = true
		return nil
	case <-ctx.Done():
		return fmt.Errorf("mcp: the answer is larger than %d KiB and the adapter was reading as many such answers as its memory budget allows (%d) until the attempt's end: %w",
			largeAnswer>>10, cap(h.a.large), ctx.Err())
	}
}

type heldReader struct {
	ctx context.Context
	r   io.Reader
	h   *answerHold
	n   int // bytes read so far
}

func (hr *heldReader) Read(p []byte) (int, error) {
	if !hr.h.held {
		if hr.n >= largeAnswer {
			if err := hr.h.take(hr.ctx); err != nil {
				return 0, err
			}
		} else if left := largeAnswer - hr.n; len(p) > left {
			p = p[:left] // not past largeAnswer without a slot
		}
	}
	n, err := hr.r.Read(p)
	hr.n += n
	return n, err
}
