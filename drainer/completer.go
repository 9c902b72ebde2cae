package drainer

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// completer writes completions in batches: one statement for whatever has
// accumulated while the previous batch was being written.
type completer struct {
	e         *Engine
	in        chan completion
	unwritten atomic.Int64
	// abandon is closed when Stop gives up on writing (the pool is gone).
	closed atomic.Bool
}

func newCompleter(e *Engine) *completer {
	return &completer{e: e, in: make(chan completion, 2*e.cfg.Workers+e.cfg.CompleteBatch)}
}

func (c *completer) add(x completion) { c.in <- x }

// close ends run after it has written everything queued.
func (c *completer) close() {
	if c.closed.CompareAndSwap(false, true) {
		close(c.in)
	}
}

func (c *completer) run() {
	defer c.e.loops.Done()
	batch := make([]completion, 0, c.e.cfg.CompleteBatch)
	for {
		first, ok := <-c.in
		if !ok {
			return
		}
		batch = append(batch[:0], first)
		linger := time.NewTimer(c.e.cfg.CompleteLinger)
	collect:
		for len(batch) < c.e.cfg.CompleteBatch {
			select {
			case x, ok := <-c.in:
				if !ok {
					break collect
				}
				batch = append(batch, x)
			case <-linger.C:
				break collect
			}
		}
		linger.Stop()
		c.flush(batch)
	}
}

// flush writes batch, retrying while the database is unreachable. While
// stopping it gives up after a bounded time: the rows then stay in_flight
// until their lease expires and are retried with the same key.
func (c *completer) flush(batch []completion) {
	e := c.e
	delay := 50 * time.Millisecond
	deadline := time.Now().Add(e.cfg.Lease)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		lost, err := writeCompletions(ctx, e.pool, e.cfg.Schema, batch)
		cancel()
		if err == nil {
			c.done(batch, lost)
			return
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.Code[:2] == "22" || pgErr.Code[:2] == "23") {
			if len(batch) > 1 {
				// One row's data is unstorable: write the rows one by one so
				// the others are not held back by it.
				e.log.Warn("completion batch rejected; writing rows one by one", "err", err, "rows", len(batch))
				for i := range batch {
					c.flush(batch[i : i+1])
				}
				return
			}
			if x := &batch[0]; x.Response != nil || x.Problem != nil {
				// The provider's answer is what the database refuses (jsonb
				// limits): keep the outcome, drop the answer.
				e.log.Warn("provider answer not storable; recording the outcome without it", "outbox_seq", x.Seq, "err", err)
				if x.Response != nil {
					x.Response = []byte(`{"body":"(the provider's answer could not be stored)","truncated":true}`)
				}
				x.Problem = nil
				continue
			}
		}
		if time.Now().After(deadline) || (e.stopped.Load() && time.Now().Add(delay).After(deadline)) {
			c.unwritten.Add(int64(len(batch)))
			e.log.Error("completions not written; rows stay in_flight until their lease expires", "rows", len(batch), "err", err)
			return
		}
		e.log.Warn("writing completions failed; retrying", "rows", len(batch), "err", err, "retry_in", delay)
		time.Sleep(delay)
		delay = min(delay*2, 2*time.Second)
	}
}

func (c *completer) done(batch []completion, lost []int64) {
	e := c.e
	if len(lost) > 0 {
		e.metrics.LeasesLost.Add(float64(len(lost)))
		e.log.Warn("lease lost before completion: another replica owns these rows; result not written", "outbox_seqs", lost)
	}
	e.afterComplete(batch)
	if len(e.hooks) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		for _, h := range e.hooks {
			h(ctx, batch)
		}
	}
}
