package drainer

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// reclaimSQL returns rows whose lease expired (their worker died or hung) to
// pending, or to outcome_unknown on non_idempotent routes. The attempt counted
// at claim stays consumed: the request may have reached the provider.
const reclaimSQL = `
WITH expired AS MATERIALIZED (
    SELECT seq FROM %[1]s.outbox
     WHERE status = 'in_flight' AND lease_expires_at < now()
     ORDER BY updated_at
     LIMIT 1000
     FOR UPDATE SKIP LOCKED
)
UPDATE %[1]s.outbox o
   SET status = CASE WHEN o.tool_name = ANY($1::text[]) THEN 'outcome_unknown' ELSE 'pending' END,
       last_error = format('lease of %%s expired during attempt %%s: the worker was lost mid-call; the attempt counts%%s',
                           o.leased_by, o.attempts,
                           CASE WHEN o.tool_name = ANY($1::text[])
                                THEN ' and the route is non_idempotent: resolve with drainer resolve' ELSE '' END),
       lease_token = NULL,
       lease_expires_at = NULL,
       leased_by = NULL,
       next_attempt_at = now(),
       updated_at = now()
  FROM expired
 WHERE o.seq = expired.seq
RETURNING o.seq`

func reclaimExpired(ctx context.Context, q queryer, schema string, nonIdempotent []string) (int, error) {
	if nonIdempotent == nil {
		nonIdempotent = []string{}
	}
	rows, err := q.Query(ctx, fmt.Sprintf(reclaimSQL, schema), pgx.QueryExecModeExec, nonIdempotent)
	if err != nil {
		return 0, fmt.Errorf("reclaim expired leases: %w", err)
	}
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, fmt.Errorf("reclaim expired leases: %w", err)
	}
	return len(seqs), nil
}

func (e *Engine) reclaimLoop() {
	defer e.loops.Done()
	t := time.NewTicker(e.cfg.ReclaimInterval)
	defer t.Stop()
	for {
		select {
		case <-e.fetchCtx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(e.fetchCtx, 30*time.Second)
		n, err := reclaimExpired(ctx, e.pool, e.cfg.Schema, e.routing.Load().NonIdempotentTools())
		cancel()
		switch {
		case err != nil && !isShutdown(e.fetchCtx, err):
			e.log.Warn("reclaim failed", "err", err)
		case n > 0:
			e.metrics.LeasesExpired.Add(float64(n))
			e.log.Warn("reclaimed rows whose lease expired", "rows", n)
			e.signal()
		}
	}
}
