package store

import (
	"context"
	"github.com/drainer-io/drainer/outbox"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// AbortedRun is what requeue needs to know of an aborted run to decide
// whether requeueing its failed rows may revive it.
type AbortedRun struct {
	ID        string           `db:"agent_run_id"`
	By        string           `db:"aborted_by"`
	Reason    string           `db:"abort_reason"`
	At        time.Time        `db:"aborted_at"`
	SagaState outbox.SagaState `db:"saga_state"`
	// SagaStarted: a compensation row exists or a forward row is
	// compensated, or the saga ended and rows of the run were pruned since
	// (retention prunes a run's rows only once its saga is done: a
	// compensation may have run and left no row).
	SagaStarted bool `db:"saga_started"`
	// AbortRequested: an agent (drainer.abort_run) or an operator (drainer
	// abort) asked for the run's abort, before or after a row failure did.
	AbortRequested bool `db:"abort_requested"`
	// Failed are the keys of its failed forward rows, in seq order.
	Failed []string `db:"failed"`
}

// abortedRunsSQL reads each run's rows once, through its intents (x: one
// look-up of the run's index a run): whether its saga started, and its
// failed rows. Tested apart, as an EXISTS beside the run, the saga's start
// was planned as one hashed pass over every row of the outbox for a batch
// of runs, so a bulk requeue cost the table, not its runs
// (TestAbortedRunsReadTheirRunsOnly).
const abortedRunsSQL = `SELECT r.agent_run_id, r.aborted_by, r.abort_reason, r.aborted_at, r.saga_state,
        (r.saga_state = {SagaDone} AND r.rows_pruned_at IS NOT NULL OR x.compensating) AS saga_started,
        r.abort_requests > 0 AS abort_requested,
        x.failed
   FROM {s}.runs r
  CROSS JOIN LATERAL (
        SELECT coalesce(bool_or(o.kind = {KindCompensation} OR o.status = {StatusCompensated}), false) AS compensating,
               coalesce(array_agg(o.key ORDER BY o.seq) FILTER (WHERE o.kind = {KindForward} AND o.status = {StatusFailed}),
                        '{}') AS failed
          FROM {s}.outbox o WHERE o.agent_run_id = r.agent_run_id) x
  WHERE r.agent_run_id = ANY($1)`

// AbortedRuns returns the aborted runs among runs.
func (s *Store) AbortedRuns(ctx context.Context, db DB, runs []string) ([]AbortedRun, error) {
	return collect[AbortedRun](ctx, db, s.sql(abortedRunsSQL), runs)
}

// LockSagas takes, in the transaction of db, the saga lock of each of runs
// (saga_lock_key, the lock advance_saga tries), in a stable order, so no
// saga step of these runs starts until the transaction ends.
func (s *Store) LockSagas(ctx context.Context, db DB, runs []string) error {
	_, err := db.Exec(ctx, s.sql(`SELECT pg_advisory_xact_lock({s}.saga_lock_key(r))
	        FROM unnest($1::text[]) AS r`), sorted(runs))
	return err
}

// LockRuns locks the runs rows of runs, in a stable order.
func (s *Store) LockRuns(ctx context.Context, db DB, runs []string) error {
	_, err := db.Exec(ctx, s.sql(`SELECT 1 FROM {s}.runs WHERE agent_run_id = ANY($1)
	        ORDER BY agent_run_id FOR UPDATE`), sorted(runs))
	return err
}

func sorted(ss []string) []string {
	out := slices.Clone(ss)
	slices.Sort(out)
	return out
}

// restoredWhere matches the never-attempted forward rows that an abort
// caused by a row failure cancelled (or that were enqueued after it).
const restoredWhere = `o.agent_run_id = $1 AND o.kind = {KindForward} AND o.status = {StatusCancelled} AND o.attempts = 0
	AND o.cancel_cause = 'run_aborted'`

// Restorable lists, in seq order, the rows RestoreRun would make pending.
func (s *Store) Restorable(ctx context.Context, db DB, run string) ([]string, error) {
	return keysOf(db.Query(ctx, s.sql(`SELECT o.key FROM {s}.outbox o WHERE `+restoredWhere+` ORDER BY o.seq`), run))
}

// FirstFailed returns the smallest key of a failed forward row of run, or
// nil when it has none.
func (s *Store) FirstFailed(ctx context.Context, db DB, run string) (*string, error) {
	var key *string
	err := db.QueryRow(ctx, s.sql(`SELECT min(key) FROM {s}.outbox
	    WHERE agent_run_id = $1 AND kind = {KindForward} AND status = {StatusFailed}`), run).Scan(&key)
	return key, err
}

// DeleteRun deletes the runs row of run: the run is no longer aborted.
func (s *Store) DeleteRun(ctx context.Context, db DB, run string) error {
	_, err := db.Exec(ctx, s.sql(`DELETE FROM {s}.runs WHERE agent_run_id = $1`), run)
	return err
}

// RestoreRun makes the rows that the abort of run cancelled pending and due
// again, and returns their keys.
func (s *Store) RestoreRun(ctx context.Context, db DB, run string) ([]string, error) {
	return keysOf(db.Query(ctx, s.sql(`UPDATE {s}.queue q
	       SET status = {StatusPending}, cancel_cause = NULL, last_error = NULL, next_attempt_at = now(), updated_at = now()
	      FROM {s}.outbox o
	     WHERE q.seq = o.seq AND `+restoredWhere+` AND q.status = {StatusCancelled} AND q.attempts = 0
	       AND q.cancel_cause = 'run_aborted' RETURNING o.key`), run))
}

// keysOf collects a statement's column of keys; never a nil slice.
func keysOf(rows pgx.Rows, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	if keys == nil {
		keys = []string{}
	}
	return keys, nil
}
