package drainer

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/outbox"
)

// RetentionPolicy says what retention prunes and when.
type RetentionPolicy struct {
	Enabled   bool
	Interval  time.Duration
	BatchSize int
	// ByStatus: terminal rows last changed longer ago are pruned.
	ByStatus map[string]time.Duration
	// Tombstones are kept at least this long: longer than any provider's
	// idempotency window, so a late re-enqueue is never sent twice.
	Tombstones time.Duration
	Audit      time.Duration
}

func retentionPolicy(cfg *config.Config) RetentionPolicy {
	r := cfg.Retention
	p := RetentionPolicy{
		Enabled:   r.IsEnabled(),
		Interval:  cmp.Or(r.Interval, config.DefaultRetentionInterval),
		BatchSize: cmp.Or(r.BatchSize, config.DefaultRetentionBatch),
		ByStatus: map[string]time.Duration{
			outbox.StatusSucceeded:   cmp.Or(r.Succeeded, config.DefaultRetainSucceeded),
			outbox.StatusFailed:      cmp.Or(r.Failed, config.DefaultRetainFailed),
			outbox.StatusCompensated: cmp.Or(r.Compensated, config.DefaultRetainCompensated),
			outbox.StatusCancelled:   cmp.Or(r.Cancelled, config.DefaultRetainCancelled),
		},
		Audit:      cmp.Or(r.Audit, config.DefaultRetainAudit),
		Tombstones: r.Tombstones,
	}
	if p.Tombstones == 0 {
		longest := time.Duration(0)
		for _, a := range cfg.Adapters {
			longest = max(longest, a.KeyTTL)
		}
		p.Tombstones = max(longest+24*time.Hour, config.DefaultTombstoneMinimum)
	}
	return p
}

// prunePass runs one round of retention: terminal rows to tombstones, old
// tombstones, old audit entries, finished runs. Each batch is a short
// transaction of its own, so pruning never holds locks for long and never
// blocks the drain (SKIP LOCKED). It returns the rows pruned by kind.
func prunePass(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, schema string, p RetentionPolicy, budget time.Duration) (map[string]int, error) {
	deadline := time.Now().Add(budget)
	out := map[string]int{}
	loop := func(kind, sql string, args ...any) error {
		for time.Now().Before(deadline) {
			var n int
			if err := db.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
				return fmt.Errorf("prune %s: %w", kind, err)
			}
			out[kind] += n
			if n < p.BatchSize {
				return nil
			}
		}
		return nil
	}
	for _, status := range []string{outbox.StatusSucceeded, outbox.StatusCancelled, outbox.StatusCompensated, outbox.StatusFailed} {
		err := loop(status, fmt.Sprintf("SELECT %s.prune_rows($1, now() - $2 * interval '1 millisecond', $3)", schema),
			status, p.ByStatus[status].Milliseconds(), p.BatchSize)
		if err != nil {
			return out, err
		}
	}
	err := loop("tombstone", fmt.Sprintf(`WITH gone AS (
	        DELETE FROM %[1]s.tombstones WHERE key IN (
	            SELECT key FROM %[1]s.tombstones WHERE pruned_at < now() - $1 * interval '1 millisecond'
	             ORDER BY pruned_at LIMIT $2 FOR UPDATE SKIP LOCKED)
	        RETURNING 1) SELECT count(*) FROM gone`, schema), p.Tombstones.Milliseconds(), p.BatchSize)
	if err != nil {
		return out, err
	}
	err = loop("audit", fmt.Sprintf("SELECT %s.prune_audit(now() - $1 * interval '1 millisecond', $2)", schema),
		p.Audit.Milliseconds(), p.BatchSize)
	if err != nil {
		return out, err
	}
	// Runs whose saga is done and whose rows are all gone: the abort needs
	// no record once even the tombstones of its rows expired.
	err = loop("run", fmt.Sprintf(`WITH gone AS (
	        DELETE FROM %[1]s.runs r WHERE r.agent_run_id IN (
	            SELECT x.agent_run_id FROM %[1]s.runs x
	             WHERE x.saga_state = 'done' AND x.aborted_at < now() - $1 * interval '1 millisecond'
	               AND NOT EXISTS (SELECT 1 FROM %[1]s.outbox o WHERE o.agent_run_id = x.agent_run_id)
	             LIMIT $2 FOR UPDATE SKIP LOCKED)
	        RETURNING 1) SELECT count(*) FROM gone`, schema), p.Tombstones.Milliseconds(), p.BatchSize)
	return out, err
}

// retentionLoop prunes on every replica's schedule; one replica at a time
// does the work (an advisory lock), the others skip that round.
func (e *Engine) retentionLoop() {
	defer e.loops.Done()
	for {
		p := e.routing.Load().Retention
		if !sleep(e.fetchCtx, cmp.Or(p.Interval, time.Minute)) {
			return
		}
		if !p.Enabled {
			continue
		}
		e.pruneOnce(p)
	}
}

func (e *Engine) pruneOnce(p RetentionPolicy) {
	ctx, cancel := context.WithTimeout(e.fetchCtx, 2*time.Minute)
	defer cancel()
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		return
	}
	key := lockKey("drainer.retention." + e.cfg.Schema)
	var leader bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&leader); err != nil || !leader {
		conn.Release()
		return
	}
	// The lock belongs to this session: it must not go back to the pool
	// still held. If the unlock cannot be confirmed, the connection is
	// closed instead, which ends the session and its lock.
	defer func() {
		var unlocked bool
		uctx, ucancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ucancel()
		if err := conn.QueryRow(uctx, "SELECT pg_advisory_unlock($1)", key).Scan(&unlocked); err != nil || !unlocked {
			_ = conn.Hijack().Close(uctx)
			return
		}
		conn.Release()
	}()
	pruned, err := prunePass(ctx, conn, e.cfg.Schema, p, time.Minute)
	for kind, n := range pruned {
		if kind != "run" && n > 0 {
			e.metrics.PrunedRows.WithLabelValues(kind).Add(float64(n))
		}
	}
	switch {
	case err != nil && !isShutdown(e.fetchCtx, err):
		e.log.Warn("retention pass failed", "err", err)
	case len(pruned) > 0:
		e.log.Debug("retention pass", "pruned", pruned)
	}
}
