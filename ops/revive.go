package ops

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
)

// abortedRun is what requeue needs to know of an aborted run.
type abortedRun struct {
	ID        string    `db:"agent_run_id"`
	By        string    `db:"aborted_by"`
	Reason    string    `db:"abort_reason"`
	At        time.Time `db:"aborted_at"`
	SagaState string    `db:"saga_state"`
	// SagaStarted: a compensation row exists or a forward row is compensated.
	SagaStarted bool `db:"saga_started"`
	// OperatorAbort: `drainer abort` was recorded for the run.
	OperatorAbort bool `db:"operator_abort"`
	// Failed are the keys of its failed forward rows.
	Failed []string `db:"failed"`
}

// abortedRuns returns the aborted runs among ids. With lock it first takes
// the saga's advisory lock of each (the one advance_saga tries) and locks
// their runs rows, so no saga step runs until the transaction ends.
func (c *Client) abortedRuns(ctx context.Context, tx pgx.Tx, ids []string, lock bool) (map[string]*abortedRun, error) {
	out := map[string]*abortedRun{}
	if len(ids) == 0 {
		return out, nil
	}
	if lock {
		sorted := append([]string(nil), ids...)
		sort.Strings(sorted)
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('drainer.saga.' || r, 0))
		        FROM unnest($1::text[]) AS r`, sorted); err != nil {
			return nil, fmt.Errorf("lock sagas: %w", err)
		}
		if _, err := tx.Exec(ctx, c.sql(`SELECT 1 FROM {s}.runs WHERE agent_run_id = ANY($1)
		        ORDER BY agent_run_id FOR UPDATE`), sorted); err != nil {
			return nil, fmt.Errorf("lock runs: %w", err)
		}
	}
	runs, err := collect[abortedRun](ctx, tx, c.sql(`SELECT r.agent_run_id, r.aborted_by, r.abort_reason, r.aborted_at, r.saga_state,
	        EXISTS (SELECT 1 FROM {s}.outbox o WHERE o.agent_run_id = r.agent_run_id
	                   AND (o.kind = 'compensation' OR o.status = 'compensated')) AS saga_started,
	        EXISTS (SELECT 1 FROM {s}.audit a WHERE a.key = 'run:' || r.agent_run_id
	                   AND a.event = 'operator:abort') AS operator_abort,
	        ARRAY(SELECT o.key FROM {s}.outbox o WHERE o.agent_run_id = r.agent_run_id
	                 AND o.kind = 'forward' AND o.status = 'failed' ORDER BY o.seq) AS failed
	   FROM {s}.runs r WHERE r.agent_run_id = ANY($1)`), ids)
	if err != nil {
		return nil, fmt.Errorf("read aborted runs: %w", err)
	}
	for i := range runs {
		out[runs[i].ID] = &runs[i]
	}
	return out, nil
}

// reviveWhy is why requeueing the failed rows in requeued cannot revive
// the run, or "" if it can.
func (r *abortedRun) reviveWhy(requeued map[string]bool) string {
	if r.By != "drainer" || r.OperatorAbort {
		return fmt.Sprintf("its run %s was aborted by %s (%s); re-running a step of an aborted run would fight its saga", r.ID, r.By, r.Reason)
	}
	if r.SagaStarted {
		return fmt.Sprintf("its run %s is aborted and its saga has started compensating (saga_state %s); re-running the step would fight the compensations", r.ID, r.SagaState)
	}
	for _, k := range r.Failed {
		if !requeued[k] {
			return fmt.Sprintf("its run %s also has failed row %s; requeue the run's failed rows together: drainer requeue --status failed --run %s", r.ID, k, r.ID)
		}
	}
	return ""
}

// cancelledWhy is why a cancelled row of the aborted run is left alone.
func (r *abortedRun) cancelledWhy() string {
	if len(r.Failed) > 0 {
		return fmt.Sprintf("its run %s is aborted (%s); requeue its failed row %s instead, which revives the run and its cancelled rows if the saga has not started", r.ID, r.Reason, r.Failed[0])
	}
	return fmt.Sprintf("its run %s is aborted (%s by %s); re-running a step of an aborted run would fight its saga", r.ID, r.Reason, r.By)
}

// restoredWhere matches the never-attempted forward rows that an abort
// caused by a row failure cancelled (or that were enqueued after it).
const restoredWhere = `o.agent_run_id = $1 AND o.kind = 'forward' AND o.status = 'cancelled' AND o.attempts = 0
	AND o.cancel_cause = 'run_aborted'`

// restorable lists the rows a revival of run would restore.
func (c *Client) restorable(ctx context.Context, q querier, run string) ([]string, error) {
	rows, err := q.Query(ctx, c.sql(`SELECT o.key FROM {s}.outbox o WHERE `+restoredWhere+` ORDER BY o.seq`), run)
	if err != nil {
		return nil, fmt.Errorf("revive run %s: %w", run, err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("revive run %s: %w", run, err)
	}
	if keys == nil {
		keys = []string{}
	}
	return keys, nil
}

// revive undoes the abort of a run whose failed rows were just requeued:
// it deletes the runs row, makes the rows the abort cancelled pending again
// and records the revival on the run's audit chain.
func (c *Client) revive(ctx context.Context, tx pgx.Tx, rv *Revival, who Who) error {
	run := rv.AgentRunID
	var still *string
	err := tx.QueryRow(ctx, c.sql(`SELECT min(key) FROM {s}.outbox
	    WHERE agent_run_id = $1 AND kind = 'forward' AND status = 'failed'`), run).Scan(&still)
	if err != nil {
		return fmt.Errorf("revive run %s: %w", run, err)
	}
	if still != nil {
		return fmt.Errorf("revive run %s: row %s failed while this command ran; nothing was changed, run it again", run, *still)
	}
	if _, err := tx.Exec(ctx, c.sql(`DELETE FROM {s}.runs WHERE agent_run_id = $1`), run); err != nil {
		return fmt.Errorf("revive run %s: %w", run, err)
	}
	rows, err := tx.Query(ctx, c.sql(`UPDATE {s}.outbox o
	       SET status = 'pending', cancel_cause = NULL, last_error = NULL, next_attempt_at = now(), updated_at = now()
	     WHERE `+restoredWhere+` RETURNING o.key`), run)
	if err != nil {
		return fmt.Errorf("revive run %s: %w", run, err)
	}
	if rv.Restored, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return fmt.Errorf("revive run %s: %w", run, err)
	}
	if rv.Restored == nil {
		rv.Restored = []string{}
	}
	reason := fmt.Sprintf("undo abort (%s)", rv.AbortReason)
	if who.Reason != "" {
		reason += ": " + who.Reason
	}
	if _, err := tx.Exec(ctx, c.sql(`SELECT {s}.audit_append('run:' || $1, 'operator:revive', $2)`), run, reason); err != nil {
		return fmt.Errorf("revive run %s: audit: %w", run, err)
	}
	return nil
}
