package drainer

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// deferrals pushes back, in bulk, the due rows of a tool that cannot be
// dispatched for a while (no route, paused, breaker open), so the claimer
// does not lease and give them back one by one: that would churn through a
// large backlog, write two audit entries per look, and delay other tools'
// rows queued behind them. One statement per tool and period, through the
// (tool_name, business_scope, seq) index of open rows; it changes no status,
// so it writes no audit entry.
type deferrals struct {
	mu   sync.Mutex
	last map[string]time.Time // tool -> last bulk deferral
}

// deferSQL defers one batch; each batch is a short transaction of its own.
const deferSQL = `
WITH batch AS (
    SELECT seq FROM %[1]s.outbox
     WHERE status = 'pending' AND tool_name = $1
       AND next_attempt_at < now() + $2 * interval '1 millisecond' * 0.5
     LIMIT $3
     FOR UPDATE SKIP LOCKED
)
UPDATE %[1]s.outbox o
   SET next_attempt_at = now() + $2 * interval '1 millisecond' * (0.75 + random() / 2)
  FROM batch WHERE o.seq = batch.seq`

// deferBatch bounds one deferral statement.
const deferBatch = 5000

// deferTool pushes tool's due pending rows to about now()+delay, at most
// once per half delay per tool. Errors are logged: the rows are then simply
// looked at one by one as before.
func (e *Engine) deferTool(tool, reason string, delay time.Duration) {
	if delay < time.Second {
		return // short refusals (saturation, rate limits) pass on their own
	}
	d := &e.deferred
	d.mu.Lock()
	if d.last == nil {
		d.last = map[string]time.Time{}
	}
	if time.Since(d.last[tool]) < delay/2 {
		d.mu.Unlock()
		return
	}
	d.last[tool] = time.Now()
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(e.fetchCtx), 30*time.Second)
	defer cancel()
	var total int64
	for ctx.Err() == nil {
		tag, err := e.pool.Exec(ctx, fmt.Sprintf(deferSQL, e.cfg.Schema), tool, delay.Milliseconds(), deferBatch)
		if err != nil {
			e.log.Warn("deferring rows failed; they are looked at one by one", "tool", tool, "reason", reason, "err", err)
			return
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < deferBatch {
			break
		}
	}
	if total > 0 {
		e.log.Debug("rows deferred", "tool", tool, "reason", reason, "rows", total, "for", delay)
	}
}

// forgetDeferrals lets the next refusal of tool defer its rows again at once
// (after a resume or a reload).
func (e *Engine) forgetDeferrals() {
	e.deferred.mu.Lock()
	e.deferred.last = nil
	e.deferred.mu.Unlock()
}

// wakeTools makes the deferred rows of tools due now (a resume).
func (e *Engine) wakeTools(tools []string) {
	if len(tools) == 0 {
		return
	}
	e.forgetDeferrals()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(e.fetchCtx), 30*time.Second)
	defer cancel()
	_, err := e.pool.Exec(ctx, fmt.Sprintf(`UPDATE %s.outbox SET next_attempt_at = now()
	      WHERE status = 'pending' AND tool_name = ANY($1) AND next_attempt_at > now()`, e.cfg.Schema), tools)
	if err != nil {
		e.log.Warn("could not wake resumed rows; they drain at their next look", "err", err)
	}
	e.signal()
}
