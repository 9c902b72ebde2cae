package drainer

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5/pgconn"
)

// completer writes completions in batches: one statement for whatever has
// accumulated while the previous batch was being written.
type completer struct {
	e  *Engine
	in chan completion
	// unwritten lists the completions that could not be written while
	// their lease lasted (the database was unreachable). They are tried
	// again every unwrittenRetry: the row, reclaimed meanwhile, takes the
	// answer as long as nobody claimed it since (see store.Completion), so
	// an answer held through a partition is recorded, and its Retry-After
	// replaces the reclaim's conservative floor. Stop asks the database
	// which of them are still in_flight under this replica's lease.
	unwrittenMu sync.Mutex
	unwritten   []store.Completion
	// retrying lets one retryUnwritten run at a time: the completer's
	// loop, the reclaimer and Stop all call it. retryingAlone: the loop's
	// is running (beside the loop).
	retrying      sync.Mutex
	retryingAlone atomic.Bool
	// flushing counts, by seq, the completions of the batch being written
	// (flush, which retries for up to a lease before it keeps them in
	// unwritten). With unwritten, they are the answers this replica holds:
	// held.
	flushing map[int64]int
	// flushed is closed once the batch being written (flushing) is
	// written, or kept for later, and its settled rows announced
	// (Config.Settled): writing.
	flushed chan struct{}
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
	retry := time.NewTicker(unwrittenRetry)
	defer retry.Stop()
	for {
		var first completion
		var ok bool
		select {
		case first, ok = <-c.in:
		case <-retry.C:
			// Not in this loop: a completion that waits for another
			// transaction's lock would hold every new one behind it.
			if c.retryingAlone.CompareAndSwap(false, true) {
				go func() {
					defer c.retryingAlone.Store(false)
					c.retryUnwritten(c.e.writes, 15*time.Second)
				}()
			}
			continue
		}
		if !ok {
			return
		}
		batch = c.collect(append(batch[:0], first))
		c.holding(batch, 1)
		c.flush(batch)
		c.holding(batch, -1)
	}
}

// holding counts batch in (d 1) or out of (d -1) the completions being
// written.
func (c *completer) holding(batch []completion, d int) {
	c.unwrittenMu.Lock()
	defer c.unwrittenMu.Unlock()
	if c.flushing == nil {
		c.flushing = map[int64]int{}
	}
	for _, x := range batch {
		if c.flushing[x.Seq] += d; c.flushing[x.Seq] <= 0 {
			delete(c.flushing, x.Seq)
		}
	}
	if d > 0 {
		c.flushed = make(chan struct{})
	} else if c.flushed != nil {
		close(c.flushed)
		c.flushed = nil
	}
}

// writing returns, while the completion of the row seq is being written,
// a channel closed once that write ended and what it settled was announced
// (Engine.Writing); nil otherwise.
func (c *completer) writing(seq int64) <-chan struct{} {
	c.unwrittenMu.Lock()
	defer c.unwrittenMu.Unlock()
	if c.flushing[seq] > 0 {
		return c.flushed
	}
	return nil
}

// held returns the rows whose answer this replica holds and has not
// written: being written, or kept for a later write (unwritten). The
// reclaimer leaves them to it (store.ReclaimPolicy.Held).
func (c *completer) held() []int64 {
	c.unwrittenMu.Lock()
	defer c.unwrittenMu.Unlock()
	seqs := make([]int64, 0, len(c.flushing)+len(c.unwritten))
	for seq := range c.flushing {
		seqs = append(seqs, seq)
	}
	for _, u := range c.unwritten {
		seqs = append(seqs, u.Seq)
	}
	return seqs
}

// collect adds to batch what arrives within the completion linger, up to
// CompleteBatch completions. A completion someone waits for (the MCP
// gateway's call, Completion.Announce) ends the linger: the batch is
// written at once, with whatever is already queued.
func (c *completer) collect(batch []completion) []completion {
	var linger <-chan time.Time
	if wait := c.e.cfg.CompleteLinger; wait > 0 && !batch[0].Announce {
		t := time.NewTimer(wait)
		defer t.Stop()
		linger = t.C
	}
	for len(batch) < c.e.cfg.CompleteBatch {
		var x completion
		var ok bool
		if linger == nil {
			select {
			case x, ok = <-c.in:
			default:
				return batch
			}
		} else {
			select {
			case x, ok = <-c.in:
			case <-linger:
				return batch
			}
		}
		if !ok {
			return batch
		}
		batch = append(batch, x)
		if x.Announce {
			linger = nil
		}
	}
	return batch
}

// flush writes batch, retrying while the database is unreachable, for at
// most a lease (while stopping, at most until Stop's deadline and
// stopWriteMargin, when a try under way is cut off too: Engine.writes);
// then it keeps the batch for
// retryUnwritten and moves on. The rows stay in_flight until their lease
// expires; this replica does not reclaim them while it holds their answers
// (held). Another replica does, and sends them again with the same key once
// they are due (held only by the reclaim's floor: the route's reclaim_hold,
// the tool's recent Retry-After), unless the late write comes first.
//
// A batch the database refuses for its data (SQLSTATE class 22 or 23) is
// written row by row, so one bad row never holds back the others, and the
// bad row itself is never retried as it is: see flushOne.
func (c *completer) flush(batch []completion) {
	e := c.e
	delay := 50 * time.Millisecond
	deadline := time.Now().Add(e.cfg.Lease)
	for {
		sent := time.Now()
		if by := e.stopBy.Load(); by != 0 && time.Unix(0, by).Before(deadline) {
			deadline = time.Unix(0, by) // stopping: Stop's deadline
		}
		ctx, cancel := context.WithTimeout(e.writes, 15*time.Second)
		done, err := e.st.Complete(ctx, e.pool, rows(batch))
		cancel()
		if err == nil {
			c.done(done, batch)
			return
		}
		if store.IsLockWait(err) {
			c.writeAround(batch, err)
			return
		}
		if isDataError(err) {
			if len(batch) == 1 {
				c.flushOne(batch[0], err)
				return
			}
			e.log.Warn("completion batch refused for its data; writing rows one by one", "err", err, "rows", len(batch))
			for i := range batch {
				c.flush(batch[i : i+1])
			}
			return
		}
		if time.Now().After(deadline) || (e.stopped.Load() && time.Now().Add(delay).After(deadline)) {
			c.noteUnwritten(batch)
			e.log.Error("completions not written; kept and tried again every few seconds (this replica does not reclaim their rows meanwhile; another replica reclaims them at lease expiry and may send them again, with the same key, before these answers are written)", "rows", len(batch), "outbox_seqs", seqsOf(batch), "err", err)
			return
		}
		if e.db.failed("completer", sent, err) {
			e.log.Warn("writing completions failed; retrying", "rows", len(batch), "err", err, "retry_in", delay)
		}
		time.Sleep(delay)
		delay = min(delay*2, 2*time.Second)
	}
}

// flushOne writes one completion the database refused for its data, each
// time with less of what it carries: first without the provider's answer
// (jsonb limits), then with a plain last_error. If even that is refused, the
// row is left in_flight (its lease expires and it is looked at again, with
// the same key) and the refusal is counted and logged: one bad row is
// isolated, never retried in a loop that would stall every worker behind it.
func (c *completer) flushOne(x completion, cause error) {
	e := c.e
	for step := 0; ; step++ {
		switch step {
		case 0:
			if x.Response == nil && x.Problem == nil {
				continue
			}
			e.log.Warn("provider answer not storable; recording the outcome without it", "outbox_seq", x.Seq, "err", cause)
			if x.Response != nil {
				x.Response = []byte(`{"body":"(the provider's answer could not be stored)","truncated":true}`)
			}
			x.Problem = nil
		case 1:
			msg := "the outcome's details could not be stored (" + sqlState(cause) + ")"
			x.LastError = &msg
		default:
			e.metrics.CompletionsRefused.Inc()
			e.log.Error("completion refused by the database; the row stays in_flight until its lease expires",
				"outbox_seq", x.Seq, "status", x.Status, "err", cause)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		done, err := e.st.Complete(ctx, e.pool, rows([]completion{x}))
		cancel()
		switch {
		case err == nil:
			c.done(done, []completion{x})
			return
		case !isDataError(err):
			c.flush([]completion{x}) // the database went away: retry as usual
			return
		}
		cause = err
	}
}

// isDataError reports whether the database refused a statement for the data
// it carries (SQLSTATE class 22, data exception, or 23, integrity).
func isDataError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && len(pgErr.Code) == 5 && (pgErr.Code[:2] == "22" || pgErr.Code[:2] == "23")
}

func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return "SQLSTATE " + pgErr.Code
	}
	return "unknown error"
}

func (c *completer) done(d store.Completed, batch []completion) {
	e := c.e
	if len(d.Lost) > 0 {
		e.metrics.LeasesLost.Add(float64(len(d.Lost)))
		e.log.Warn("completions not written: their rows are no longer under this lease (an earlier try wrote them and its answer was lost, or the lease expired and the row was claimed again, or an operator settled it)", "outbox_seqs", d.Lost)
	}
	e.sagas.Notify(d.Runs...)
	c.announce(d, batch)
	c.rewake(batch)
	c.nextInScope(d, batch)
	e.retries.schedule(d, batch)
}

// nextInScope makes due the next row of each scope of an ordered tool the
// batch let go of (held behind it: scopeHolds) and then wakes the claim
// loop: the next row of its scope is claimable from now, and nothing else
// would claim it before the poll (a scope of n rows took n polls).
func (c *completer) nextInScope(d store.Completed, batch []completion) {
	if c.releaseNext(d, batch) {
		c.e.wakeFor(causeSignal) // the claim starts no later than the floor releaseNext set
	}
}

// announce tells Config.Settled the announcing rows the batch settled
// (written, not lost to their fence), in this process, once their
// completion committed, without the round trip of the settle
// notification, which other processes still get. A success with a tool
// result comes with the state the completion wrote: the gateway's call
// waiting for it answers without reading its row back.
func (c *completer) announce(d store.Completed, batch []completion) {
	settled := c.e.cfg.Settled
	if settled == nil {
		return
	}
	var rows []store.Settle
	for i := range batch {
		if x := &batch[i]; x.Announce && x.row != nil && !slices.Contains(d.Lost, x.Seq) {
			rows = append(rows, settledRow(x))
		}
	}
	if len(rows) > 0 {
		settled(rows)
	}
}

// settledRow is the news of x's row, settled by x: with the state x wrote
// when it succeeded with a record the database keeps (store.RecordKept). For any other end, the row holds
// what x does not know (a last_error or response kept from before), and
// the news is its key alone.
func settledRow(x *completion) store.Settle {
	s := store.Settle{Key: x.row.Key}
	if x.Status == outbox.StatusSucceeded && store.RecordKept(x.Record) {
		s.Known = true
		s.Call = store.Call{Key: x.row.Key, Status: x.Status, Response: x.Response, Record: x.Record,
			Traceparent: deref(x.row.Traceparent)}
	}
	return s
}

// rewake wakes the rows of the batch that were handed back to wait for a
// route or a resume, when the route is now loaded or the pause lifted.
// The reload's (or the resume's) own wake may have run while such a row was
// still leased, before its hand-back was written: the wake found nothing
// to wake, and the hand-back then pushed the row a whole unrouted recheck
// (or paused recheck) away. Checked after the write, one of the two wakes
// always comes after it: a reload (resume) seen here was published before
// this check, and one not seen publishes, and wakes, after it.
func (c *completer) rewake(batch []completion) {
	var tools []string
	rt := c.e.routing.Load()
	for i := range batch {
		x := &batch[i]
		if x.waitsFor == "" || slices.Contains(tools, x.row.ToolName) {
			continue
		}
		var over bool
		switch x.waitsFor {
		case outbox.RefusedUnrouted:
			if route, ok := rt.Routes[x.row.ToolName]; ok {
				_, over = rt.Registry.Get(route.Adapter)
			}
		case outbox.RefusedPaused:
			over = !c.e.stillPaused(x.row.ToolName)
		}
		if over {
			tools = append(tools, x.row.ToolName)
		}
	}
	if len(tools) > 0 {
		c.e.log.Debug("rows handed back to wait can go out now: waking them", "tools", tools)
		c.e.deferrer.wake(tools)
	}
}

// seqsOf lists the outbox_seq of each completion, naming the rows in a log
// line.
func seqsOf(cs []completion) []int64 {
	out := make([]int64, len(cs))
	for i := range cs {
		out[i] = cs[i].Seq
	}
	return out
}

// rows returns what the store writes of cs.
func rows(cs []completion) []store.Completion {
	out := make([]store.Completion, len(cs))
	for i := range cs {
		out[i] = cs[i].Completion
	}
	return out
}
