package store

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Retention says what one pruning pass removes: terminal rows last changed
// longer ago than their status's age (they leave a tombstone), tombstones
// and audit entries older than theirs (a whole generation at a time:
// rotateAudit), and finished runs without rows.
type Retention struct {
	// ByStatus maps each terminal status to the age past which its rows go.
	ByStatus   map[outbox.Status]time.Duration
	Tombstones time.Duration
	Audit      time.Duration
	// Compensable maps each tool whose route names a compensation to its
	// compensation_window: a succeeded forward row of such a tool stays
	// until its run's saga settled or the window passed since it
	// succeeded, since its run can still be aborted and need it undone.
	Compensable map[string]time.Duration
	// BatchSize bounds each statement (a short transaction of its own).
	BatchSize int
	// BatchTimeout bounds how long each pruning batch's statement may
	// take (0: DefaultBatchTimeout). The audit's rotation steps are not
	// bounded by it (RotateAudit).
	BatchTimeout time.Duration
}

// DefaultBatchTimeout is Retention.BatchTimeout's default: a batch reads
// and deletes at most BatchSize rows, so a statement that runs this long
// is stuck (a connection that no longer answers), not slow.
const DefaultBatchTimeout = 2 * time.Minute

// pruneRunsSQL deletes runs whose saga is done and whose rows are all gone:
// the abort needs no record once even the tombstones of its rows expired
// (the last of them was made at rows_pruned_at, or before the abort).
//
// Both statements below delete their victims by key, given as an array
// (= ANY (ARRAY(…)), one index probe each): as a semi-join (IN (…)) the
// planner joined them against a scan of the whole table, so each pass cost
// the table's size, not the batch's (TestTombstonePruneReadsWhatItForgets).
const pruneRunsSQL = `WITH gone AS (
        DELETE FROM {s}.runs r WHERE r.agent_run_id = ANY (ARRAY(
            SELECT x.agent_run_id FROM {s}.runs x
             WHERE x.saga_state = {SagaDone}
               AND greatest(x.aborted_at, x.rows_pruned_at) < now() - $1 * interval '1 millisecond'
               AND NOT EXISTS (SELECT 1 FROM {s}.outbox o WHERE o.agent_run_id = x.agent_run_id)
             LIMIT $2 FOR UPDATE SKIP LOCKED))
        RETURNING 1) SELECT count(*) FROM gone`

// pruneTombstonesSQL forgets keys whose tombstone is past its age (their
// row in the key space, marked pruned). A tombstone that is the evidence of
// tampering with its audit chain stays, so that audit verify goes on
// reporting it (audit_problems): one whose status the chain's last
// recorded change (or its anchor, once truncated) does not record (a change
// made with the audit triggers off), whose head is not the chain's last
// hash (an entry added or removed at its end), or whose chain is gone (no
// entry, no anchor). A key's entries are read once, beside the key: its
// last entry's hash and its last recorded status, aggregated in id order
// from the per-key index (no order by the id index: see audit_head.sql).
// The look-up is lateral, so the keys are still read in pruned_at order up
// to the batch (joined to the anchors as well, the plan read every key).
const pruneTombstonesSQL = `WITH gone AS (
        DELETE FROM {s}.keys WHERE key = ANY (ARRAY(
            SELECT k.key FROM {s}.keys k
             CROSS JOIN LATERAL (SELECT (array_agg(a.hash ORDER BY a.id DESC))[1] AS hash,
                                        (array_agg(a.to_status ORDER BY a.id DESC)
                                             FILTER (WHERE a.to_status IS NOT NULL))[1] AS status
                                   FROM {s}.audit a WHERE a.key = k.key) h
             WHERE k.pruned_at < now() - $1 * interval '1 millisecond'
               AND (h.hash IS NOT NULL OR EXISTS (SELECT 1 FROM {s}.audit_anchors x WHERE x.key = k.key))
               AND (k.audit_head IS NULL OR k.audit_head IS NOT DISTINCT FROM coalesce(
                       h.hash, (SELECT x.hash FROM {s}.audit_anchors x WHERE x.key = k.key)))
               AND k.final_status IS NOT DISTINCT FROM coalesce(
                       h.status, (SELECT x.status FROM {s}.audit_anchors x WHERE x.key = k.key), k.final_status)
             ORDER BY k.pruned_at LIMIT $2 FOR UPDATE OF k SKIP LOCKED))
        RETURNING 1) SELECT count(*) FROM gone`

// Prune runs one pass within budget and returns the rows pruned by kind
// (a terminal status, "tombstone", "audit", "run"). Each batch is a short
// transaction of its own (SKIP LOCKED), so pruning never holds locks for
// long nor blocks the drain; each runs within r.BatchTimeout. The budget
// is checked between statements: a rotation step of the audit, whose work
// grows with its generation, runs to its end (RotateAudit).
func (s *Store) Prune(ctx context.Context, db BeginDB, r Retention, budget time.Duration) (map[string]int, error) {
	deadline := time.Now().Add(budget)
	out := map[string]int{}
	batchTimeout := cmp.Or(r.BatchTimeout, DefaultBatchTimeout)
	batch := func(sql string, args ...any) (n int, err error) {
		bctx, cancel := context.WithTimeout(ctx, batchTimeout)
		defer cancel()
		err = db.QueryRow(bctx, s.sql(sql), args...).Scan(&n)
		return n, err
	}
	loop := func(kind, sql string, args ...any) error {
		for time.Now().Before(deadline) {
			n, err := batch(sql, args...)
			if err != nil {
				return fmt.Errorf("prune %s: %w", kind, err)
			}
			out[kind] += n
			if n < r.BatchSize {
				return nil
			}
		}
		return nil
	}
	compTools := make([]string, 0, len(r.Compensable))
	windows := make([]int64, 0, len(r.Compensable))
	for tool, w := range r.Compensable {
		compTools, windows = append(compTools, tool), append(windows, w.Milliseconds())
	}
	for _, status := range []outbox.Status{outbox.StatusSucceeded, outbox.StatusCancelled, outbox.StatusCompensated, outbox.StatusFailed} {
		if err := loop(string(status), "SELECT {s}.prune_rows($1, now() - $2 * interval '1 millisecond', $3, $4, $5)",
			status, r.ByStatus[status].Milliseconds(), r.BatchSize, compTools, windows); err != nil {
			return out, err
		}
	}
	if err := loop("tombstone", pruneTombstonesSQL, r.Tombstones.Milliseconds(), r.BatchSize); err != nil {
		return out, err
	}
	if err := s.rotateAudit(ctx, db, r.Audit, deadline, out); err != nil {
		return out, err
	}
	err := loop("run", pruneRunsSQL, r.Tombstones.Milliseconds(), r.BatchSize)
	return out, err
}

// rotateAudit turns the audit's generations until there is nothing more
// to do now or the deadline passes; the entries truncated count as
// "audit", the anchor versions of forgotten chains retired as "anchor".
func (s *Store) rotateAudit(ctx context.Context, db BeginDB, retention time.Duration, deadline time.Time, out map[string]int) error {
	for time.Now().Before(deadline) {
		step, err := s.RotateAudit(ctx, db, retention, retention/3)
		if err != nil {
			return err
		}
		word, count, _ := strings.Cut(step, " ")
		switch word {
		case "truncated":
			n, _ := strconv.Atoi(count)
			out["audit"] += n
		case "retired":
			n, _ := strconv.Atoi(count)
			out["anchor"] += n
		case "sealed", "anchored", "emptied", "flipped":
		default: // idle, waiting, busy
			return nil
		}
	}
	return nil
}

// RotateAudit runs one step of the audit's generations
// (migrations/code/functions/rotate_audit.sql) and returns it ("sealed",
// "anchored N", "emptied", "truncated N", "retired N", "flipped",
// "waiting", "idle" or "busy"). A generation is truncated once every entry
// in it is older than retention; one is opened every span. The retention
// pass gives retention ÷ 3 as span, so an entry is kept between retention
// and 4/3 of it.
//
// A step's work grows with its generation: the anchoring and the
// truncation digest every entry of it, and the sweep every version of an
// anchors record (about 30 µs an entry, docs/reliability.md, "The audit
// rotates whatever a generation holds"). So a step runs to its end: with
// statement_timeout off for its transaction (one set for drainer's
// sessions, in its URL's options, say, would end it at the same point
// every time, and the generation would never go), and under ctx alone,
// which only a shutdown ends. Its locks are taken with a lock_timeout of
// their own (busy).
func (s *Store) RotateAudit(ctx context.Context, db BeginDB, retention, span time.Duration) (string, error) {
	var step string
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = 0"); err != nil {
			return err
		}
		return tx.QueryRow(ctx, s.sql("SELECT {s}.rotate_audit($1 * interval '1 microsecond', $2 * interval '1 microsecond')"),
			retention.Microseconds(), span.Microseconds()).Scan(&step)
	})
	if err != nil {
		return "", fmt.Errorf("rotate audit: %w", err)
	}
	return step, nil
}

// WithRetentionLock runs fn on a connection holding the schema's retention
// lock, so one replica at a time prunes; it reports false (and runs nothing)
// when another replica holds it. The lock belongs to the session: it must
// not go back to the pool still held, so if its release cannot be
// confirmed the connection is closed instead, which ends the session and
// its lock.
func (s *Store) WithRetentionLock(ctx context.Context, pool *pgxpool.Pool, fn func(BeginDB) error) (bool, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("retention lock: %w", err)
	}
	key := s.lockKey(lockRetention)
	var leader bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&leader); err != nil || !leader {
		conn.Release()
		if err != nil {
			return false, fmt.Errorf("retention lock: %w", err)
		}
		return false, nil
	}
	defer func() {
		var unlocked bool
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := conn.QueryRow(uctx, "SELECT pg_advisory_unlock($1)", key).Scan(&unlocked); err != nil || !unlocked {
			_ = conn.Hijack().Close(uctx)
			return
		}
		conn.Release()
	}()
	return true, fn(conn)
}
