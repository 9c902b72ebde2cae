package drainer

import (
	"context"
	"slices"
	"time"

	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5/pgtype"
)

// This file holds the completions a replica keeps for a later write: those
// it could not write while their lease lasted (the database unreachable),
// those another transaction's lock holds back (writeAround), and those an
// earlier engine on the database left (inherit); how they are tried again,
// one try at a time, and how Stop counts what is left of them.

// unwrittenRetry is how often completions not yet written are tried again.
const unwrittenRetry = 2 * time.Second

// maxUnwritten bounds the completions kept for a later write; past it the
// oldest are dropped (their rows are safe: each waits out its reclaim's
// floor and is sent again with the same key).
const maxUnwritten = 100_000

func (c *completer) noteUnwritten(batch []completion) {
	c.unwrittenMu.Lock()
	defer c.unwrittenMu.Unlock()
	c.unwritten = append(c.unwritten, rows(batch)...)
	if over := len(c.unwritten) - maxUnwritten; over > 0 {
		c.e.log.Warn("too many completions wait for the database: dropping the oldest; their rows are sent again after their reclaim's floor",
			"dropped", over)
		c.unwritten = append([]store.Completion(nil), c.unwritten[over:]...)
	}
}

// retryUnwritten tries once to write the completions not yet written,
// up to a few batches' worth, and forgets those the database answered for
// (written, or refused by their fence: the row was claimed again).
func (c *completer) retryUnwritten(ctx context.Context, timeout time.Duration) error {
	c.retrying.Lock()
	defer c.retrying.Unlock()
	return c.retryUnwrittenLocked(ctx, timeout)
}

// retryUnwrittenLocked is retryUnwritten, with retrying held.
func (c *completer) retryUnwrittenLocked(ctx context.Context, timeout time.Duration) error {
	c.unwrittenMu.Lock()
	n := min(len(c.unwritten), 4*c.e.cfg.CompleteBatch)
	try := append([]store.Completion(nil), c.unwritten[:n]...)
	c.unwrittenMu.Unlock()
	if n == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	written := try
	done, err := c.e.st.Complete(ctx, c.e.pool, try)
	if store.IsLockWait(err) && n > 1 {
		// One of them waits for a lock another transaction holds: each
		// alone, so that the others are written.
		done, written, err = c.eachAlone(ctx, try)
	} else if err != nil {
		written = nil
	}
	if len(written) == 0 {
		c.e.log.Debug("completions still not written; trying again later", "rows", n, "err", err)
		return err
	}
	c.forget(written)
	c.e.log.Info("completions kept for a later write (the database unreachable, or a lock held elsewhere) written late",
		"written", len(written)-len(done.Lost), "claimed_again_meanwhile", len(done.Lost), "still_waiting", n-len(written))
	c.done(done, nil)
	return err
}

// eachAlone writes cs one by one, and returns what the written ones did,
// which they are, and the error of the last one not written, if any.
func (c *completer) eachAlone(ctx context.Context, cs []store.Completion) (store.Completed, []store.Completion, error) {
	var out store.Completed
	var written []store.Completion
	var last error
	for _, x := range cs {
		if ctx.Err() != nil {
			return out, written, ctx.Err()
		}
		done, err := c.e.st.CompleteWithin(ctx, c.e.pool, []store.Completion{x}, aloneLockWait)
		if err != nil {
			last = err
			continue
		}
		written = append(written, x)
		out.Lost = append(out.Lost, done.Lost...)
		for _, run := range done.Runs {
			if !slices.Contains(out.Runs, run) {
				out.Runs = append(out.Runs, run)
			}
		}
	}
	return out, written, last
}

// forget drops the completions of written from those kept for a later
// write: by row and lease, wherever they are now (a batch kept meanwhile
// may have dropped the oldest: noteUnwritten).
func (c *completer) forget(written []store.Completion) {
	type lease struct {
		seq   int64
		token pgtype.UUID
	}
	gone := make(map[lease]bool, len(written))
	for _, x := range written {
		gone[lease{x.Seq, x.Token}] = true
	}
	c.unwrittenMu.Lock()
	defer c.unwrittenMu.Unlock()
	c.unwritten = slices.DeleteFunc(c.unwritten, func(x store.Completion) bool { return gone[lease{x.Seq, x.Token}] })
}

// inherit writes the completions an earlier engine on this database could
// not (Config.Inherited) and keeps those the database does not take yet.
func (c *completer) inherit(ctx context.Context, inherited []store.Completion) {
	if len(inherited) == 0 {
		return
	}
	c.unwrittenMu.Lock()
	c.unwritten = append(c.unwritten, inherited...)
	c.unwrittenMu.Unlock()
	c.writeUnwritten(ctx, true)
	c.unwrittenMu.Lock()
	left := len(c.unwritten)
	c.unwrittenMu.Unlock()
	c.e.log.Info("completions an earlier engine on this database could not write taken over",
		"rows", len(inherited), "still_unwritten", left)
}

// writeUnwritten writes the completions not yet written, batch by batch,
// while the database takes them, and returns the error of the batch it
// could not write. Unless wait, it returns at once when another write of
// them is under way.
func (c *completer) writeUnwritten(ctx context.Context, wait bool) error {
	if wait {
		c.retrying.Lock()
	} else if !c.retrying.TryLock() {
		return nil
	}
	defer c.retrying.Unlock()
	for range maxUnwritten/(4*c.e.cfg.CompleteBatch) + 1 {
		c.unwrittenMu.Lock()
		left := len(c.unwritten)
		c.unwrittenMu.Unlock()
		if left == 0 || ctx.Err() != nil {
			return ctx.Err()
		}
		if err := c.retryUnwrittenLocked(ctx, 5*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// stillLeased writes what it can of the completions not yet written, then
// counts the rows of the others that are still in_flight under this
// replica's lease. Rows another replica reclaimed and settled since are
// not: they left nothing behind. When the database cannot answer, every
// unwritten row counts.
func (c *completer) stillLeased(ctx context.Context) int {
	c.writeUnwritten(ctx, true)
	c.unwrittenMu.Lock()
	defer c.unwrittenMu.Unlock()
	if len(c.unwritten) == 0 {
		return 0
	}
	seqs := make([]int64, len(c.unwritten))
	tokens := make([]pgtype.UUID, len(c.unwritten))
	for i, u := range c.unwritten {
		seqs[i], tokens[i] = u.Seq, u.Token
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := c.e.st.StillLeased(ctx, c.e.pool, seqs, tokens)
	if err != nil {
		c.e.log.Warn("cannot tell whether unwritten completions were settled since", "rows", len(seqs), "err", err)
		return len(seqs)
	}
	return n
}

// writeAround writes a batch that waited too long for a lock (cause) row
// by row, each waiting at most aloneLockWait: the rows another
// transaction holds back (a run's abort in a transaction left open: the
// trigger of a row of that run ending failed waits for it), and the other
// rows of their runs, untried, are kept for retryUnwritten, and every other
// row is written now, so that one held lock never stops this replica's
// completions, and with them its claims.
func (c *completer) writeAround(batch []completion, cause error) {
	e := c.e
	var blocked []completion
	heldRuns := map[string]bool{} // the runs of the rows held back: their siblings wait too
	for i := range batch {
		if run := runOf(batch[i]); run != "" && heldRuns[run] {
			blocked = append(blocked, batch[i])
			continue
		}
		ctx, cancel := context.WithTimeout(e.writes, 15*time.Second)
		done, err := e.st.CompleteWithin(ctx, e.pool, rows(batch[i:i+1]), aloneLockWait)
		cancel()
		switch {
		case err == nil:
			c.done(done, batch[i:i+1])
		case store.IsLockWait(err):
			blocked = append(blocked, batch[i])
			if run := runOf(batch[i]); run != "" {
				heldRuns[run] = true
			}
		default:
			c.flush(batch[i : i+1])
		}
	}
	if len(blocked) > 0 {
		c.noteUnwritten(blocked)
		e.log.Warn("completions wait for a lock another transaction holds (a run's abort in a transaction left open, say); kept and tried again every few seconds, the others written",
			"rows", len(blocked), "outbox_seqs", seqsOf(blocked), "written", len(batch)-len(blocked), "err", cause)
	}
}

// runOf is the run of x's row ("" when unknown).
func runOf(x completion) string {
	if x.row == nil {
		return ""
	}
	return x.row.AgentRunID
}

// aloneLockWait bounds the lock waits of a completion written alone after
// its batch waited too long (writeAround, retryUnwritten): the rows held
// back cost this much each.
const aloneLockWait = 100 * time.Millisecond
