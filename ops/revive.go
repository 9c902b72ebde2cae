package ops

import (
	"context"
	"fmt"

	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5"
)

// abortedRun is what requeue needs to know of an aborted run.
type abortedRun = store.AbortedRun

// abortedRuns returns the aborted runs among ids. With lock it first takes
// the saga's advisory lock of each (the one advance_saga tries) and locks
// their runs rows, so no saga step runs until the transaction ends.
func (c *Client) abortedRuns(ctx context.Context, tx pgx.Tx, ids []string, lock bool) (map[string]*abortedRun, error) {
	out := map[string]*abortedRun{}
	if len(ids) == 0 {
		return out, nil
	}
	if lock {
		if err := c.st.LockSagas(ctx, tx, ids); err != nil {
			return nil, fmt.Errorf("lock sagas: %w", err)
		}
		if err := c.st.LockRuns(ctx, tx, ids); err != nil {
			return nil, fmt.Errorf("lock runs: %w", err)
		}
	}
	runs, err := c.st.AbortedRuns(ctx, tx, ids)
	if err != nil {
		return nil, fmt.Errorf("read aborted runs: %w", err)
	}
	for i := range runs {
		out[runs[i].ID] = &runs[i]
	}
	return out, nil
}

// reviveWhy is why requeueing the failed rows in requeued cannot revive
// the run r, or "" if it can.
func reviveWhy(r *abortedRun, requeued map[string]bool) string {
	if r.By != "drainer" {
		return fmt.Sprintf("its run %s was aborted by %s (%s); re-running a step of an aborted run would fight its saga", r.ID, r.By, r.Reason)
	}
	if r.AbortRequested {
		return fmt.Sprintf("its run %s was aborted by %s (%s) and an agent or operator asked for its abort too (see drainer inspect and the run's audit chain); re-running a step of a run somebody gave up on would undo that decision", r.ID, r.By, r.Reason)
	}
	if r.SagaStarted {
		return fmt.Sprintf("its run %s is aborted and its saga has started compensating (saga_state %s; a compensation that ended may have been pruned with its rows); re-running the step would fight the compensations", r.ID, r.SagaState)
	}
	for _, k := range r.Failed {
		if !requeued[k] {
			return fmt.Sprintf("its run %s also has failed row %s; requeue the run's failed rows together: drainer requeue --status failed --run %s", r.ID, k, r.ID)
		}
	}
	return ""
}

// cancelledWhy is why a cancelled row of the aborted run r is left alone.
func cancelledWhy(r *abortedRun) string {
	if len(r.Failed) > 0 {
		return fmt.Sprintf("its run %s is aborted (%s); requeue its failed row %s instead, which revives the run and its cancelled rows if the saga has not started", r.ID, r.Reason, r.Failed[0])
	}
	return fmt.Sprintf("its run %s is aborted (%s by %s); re-running a step of an aborted run would fight its saga", r.ID, r.Reason, r.By)
}

// restorable lists the rows a revival of run would restore: the
// never-attempted forward rows that an abort caused by a row failure
// cancelled (or that were enqueued after it).
func (c *Client) restorable(ctx context.Context, db store.DB, run string) ([]string, error) {
	keys, err := c.st.Restorable(ctx, db, run)
	if err != nil {
		return nil, fmt.Errorf("revive run %s: %w", run, err)
	}
	return keys, nil
}

// revive undoes the abort of a run whose failed rows were just requeued:
// it deletes the runs row, makes the rows the abort cancelled pending again
// and records the revival on the run's audit chain.
func (c *Client) revive(ctx context.Context, tx pgx.Tx, rv *Revival, who Who) error {
	run := rv.AgentRunID
	still, err := c.st.FirstFailed(ctx, tx, run)
	if err != nil {
		return fmt.Errorf("revive run %s: %w", run, err)
	}
	if still != nil {
		return fmt.Errorf("revive run %s: row %s failed while this command ran; nothing was changed, run it again", run, *still)
	}
	if err := c.st.DeleteRun(ctx, tx, run); err != nil {
		return fmt.Errorf("revive run %s: %w", run, err)
	}
	if rv.Restored, err = c.st.RestoreRun(ctx, tx, run); err != nil {
		return fmt.Errorf("revive run %s: %w", run, err)
	}
	reason := fmt.Sprintf("undo abort (%s)", rv.AbortReason)
	if who.Reason != "" {
		reason += ": " + who.Reason
	}
	if err := c.st.AuditAppend(ctx, tx, "run:"+run, "operator:revive", &reason); err != nil {
		return fmt.Errorf("revive run %s: audit: %w", run, err)
	}
	return nil
}
