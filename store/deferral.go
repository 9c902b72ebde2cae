package store

import (
	"context"
	"fmt"
	"time"
)

// deferSQL pushes one batch of a tool's due pending rows to now() + $2 ms;
// from DeferJitterFrom on, up to half as much again (jittered, so a large
// backlog does not come back at one instant). Never earlier: the gate's
// recheck or probe comes due at $2, and when it is answered the rows are
// woken at once; a row due before it would wait for a poll. A short
// deferral is not jittered, so that one wake of every replica when it ends
// finds all its rows (drainer's deferrer.wakeAllWhenDue);
// rows already due later are left alone. Each batch is a short transaction.
// The batch's rows are updated by key (= ANY of them: one index probe
// each): joined as a table, the planner hashed them and scanned every
// generation whole, so a batch cost the queue's size, not its own
// (TestDeferReadsOneBatch).
const deferSQL = `
UPDATE {s}.queue o
   SET next_attempt_at = now() + $2 * interval '1 millisecond'
                         * (1 + CASE WHEN $2 >= $4 THEN random() / 2 ELSE 0 END)
 WHERE o.seq = ANY (ARRAY(
    SELECT seq FROM {s}.queue
     WHERE status = {StatusPending} AND tool_name = $1
       AND next_attempt_at < now() + $2 * interval '1 millisecond' * 0.5
     LIMIT $3
     FOR UPDATE SKIP LOCKED))`

// deferUnroutedSQL is deferSQL for the rows whose tool has no route: every
// tool but the routed ones ($1), deferred together. Producers name tools
// freely, so a tool at a time would cost a statement per invented name, each
// finding the row or two that name has (DeferUnrouted).
const deferUnroutedSQL = `
UPDATE {s}.queue o
   SET next_attempt_at = now() + $2 * interval '1 millisecond'
                         * (1 + CASE WHEN $2 >= $4 THEN random() / 2 ELSE 0 END)
 WHERE o.seq = ANY (ARRAY(
    SELECT seq FROM {s}.queue
     WHERE status = {StatusPending} AND tool_name <> ALL($1::text[])
       AND next_attempt_at < now() + $2 * interval '1 millisecond' * 0.5
     LIMIT $3
     FOR UPDATE SKIP LOCKED))`

// wakeSQL makes one batch ($2) of the deferred rows of some tools ($1)
// due now, as deferSQL defers them: updated by key, each batch a short
// transaction that skips rows locked by others. A row held by its
// not_before floor is left as it is: the schema trigger would keep it at
// the floor, and the next batch would find it again.
const wakeSQL = `
UPDATE {s}.queue o SET next_attempt_at = now()
 WHERE o.seq = ANY (ARRAY(
    SELECT seq FROM {s}.queue
     WHERE status = {StatusPending} AND tool_name = ANY($1)
       AND next_attempt_at > greatest(not_before, now())
     LIMIT $2
     FOR UPDATE SKIP LOCKED))`

// DeferJitterFrom is the shortest deferral whose rows' due times are
// jittered (deferSQL).
const DeferJitterFrom = 10 * time.Second

// DeferBatch bounds one deferral statement.
const DeferBatch = 5000

// Defer pushes up to DeferBatch due rows of tool to about now() + delay and
// returns how many it moved. Neither it nor Wake changes a status, so
// neither writes an audit entry.
func (s *Store) Defer(ctx context.Context, db DB, tool string, delay time.Duration) (int64, error) {
	tag, err := db.Exec(ctx, s.sql(deferSQL), tool, delay.Milliseconds(), DeferBatch, DeferJitterFrom.Milliseconds())
	if err != nil {
		return 0, fmt.Errorf("defer rows of %s: %w", tool, err)
	}
	return tag.RowsAffected(), nil
}

// DeferUnrouted pushes up to DeferBatch due rows whose tool is none of
// routed to about now() + delay, as Defer does one tool's, and returns how
// many it moved.
func (s *Store) DeferUnrouted(ctx context.Context, db DB, routed []string, delay time.Duration) (int64, error) {
	if routed == nil {
		routed = []string{}
	}
	tag, err := db.Exec(ctx, s.sql(deferUnroutedSQL), routed, delay.Milliseconds(), DeferBatch, DeferJitterFrom.Milliseconds())
	if err != nil {
		return 0, fmt.Errorf("defer rows without a route: %w", err)
	}
	return tag.RowsAffected(), nil
}

// Wake makes the pending rows of tools due now, each at its not_before
// floor at the earliest, DeferBatch rows a statement: waking a tool's
// deferred backlog of a million rows is many short transactions, not one
// that outlives its timeout and is rolled back whole.
func (s *Store) Wake(ctx context.Context, db DB, tools []string) error {
	for {
		tag, err := db.Exec(ctx, s.sql(wakeSQL), tools, DeferBatch)
		if err != nil {
			return fmt.Errorf("wake rows: %w", err)
		}
		if tag.RowsAffected() < DeferBatch {
			return nil
		}
	}
}
