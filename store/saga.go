package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/drainer-io/drainer/outbox"
	"github.com/jackc/pgx/v5"
)

// SagaStep is the outcome of advancing one run's saga: its new state
// (outbox.Saga*), outbox.SagaBusy when another replica was advancing it,
// outbox.SagaNotAborted when the run is not aborted, outbox.SagaError when
// the step failed.
type SagaStep struct {
	Run   string
	State outbox.SagaState
	// Err is why the step failed in the database (sweeps only: the step
	// was rolled back alone and noted on the run).
	Err string
}

// Compensators says which tool compensates which: Comps[i] undoes Tools[i].
type Compensators struct {
	Tools []string
	Comps []string
}

// AdvanceSaga moves one run's saga forward by at most one compensation
// (migrations/code/functions/advance_saga.sql) in the transaction of db.
func (s *Store) AdvanceSaga(ctx context.Context, db DB, run string, c Compensators) (outbox.SagaState, error) {
	var state outbox.SagaState
	err := db.QueryRow(ctx, s.sql("SELECT {s}.advance_saga($1, $2, $3)"), run, nonNil(c.Tools), nonNil(c.Comps)).Scan(&state)
	if err != nil {
		return "", fmt.Errorf("advance saga of run %q: %w", run, err)
	}
	return state, nil
}

// SweepSagas advances up to limit active sagas (waiting or compensating)
// whose run id sorts after after, each in a subtransaction of its own
// (migrations/code/functions/sweep_sagas.sql).
func (s *Store) SweepSagas(ctx context.Context, db DB, after string, limit int, c Compensators) ([]SagaStep, error) {
	rows, err := db.Query(ctx, s.sql("SELECT agent_run_id, state FROM {s}.sweep_sagas($1, $2, $3, $4)"),
		after, limit, nonNil(c.Tools), nonNil(c.Comps))
	if err != nil {
		return nil, fmt.Errorf("saga sweep: %w", err)
	}
	steps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SagaStep, error) {
		var st SagaStep
		if err := r.Scan(&st.Run, &st.State); err != nil {
			return st, err
		}
		if msg, failed := strings.CutPrefix(string(st.State), string(outbox.SagaError)+": "); failed {
			st.State, st.Err = outbox.SagaError, msg
		}
		return st, nil
	})
	if err != nil {
		return nil, fmt.Errorf("saga sweep: %w", err)
	}
	return steps, nil
}

// queueAlertsSQL queues one alert row per compensation_failed row that has
// none yet, keyed by (AlertRun, the compensation row's key, alert_tool(),
// its run), so each is alerted exactly once.
const queueAlertsSQL = `
WITH failed AS (
    SELECT c.key, c.agent_run_id, c.step_id, c.tool_name, c.forward_key, c.attempts, c.last_error,
           {s}.idempotency_key($1, c.key, {s}.alert_tool(), c.agent_run_id) AS alert_key
      FROM {s}.outbox c
     WHERE c.status = {StatusCompensationFailed} AND c.kind = {KindCompensation}
       AND ($2::text[] IS NULL OR c.agent_run_id = ANY($2::text[]))
), payloads AS (
    SELECT f.*, jsonb_build_object(
               'event', {StatusCompensationFailed},
               'key', f.key, 'agent_run_id', f.agent_run_id, 'step_id', f.step_id,
               'tool_name', f.tool_name, 'forward_key', f.forward_key,
               'attempts', f.attempts, 'last_error', f.last_error) AS payload
      FROM failed f
     WHERE NOT EXISTS (SELECT 1 FROM {s}.outbox a WHERE a.key = f.alert_key)
), registered AS (
    -- The key space decides, as for every row: an alert already sent and
    -- pruned is not queued again.
    INSERT INTO {s}.keys (key, payload_hash)
    SELECT p.alert_key, {s}.payload_hash(p.payload) FROM payloads p
    ON CONFLICT (key) DO NOTHING
    RETURNING key
), intended AS (
    INSERT INTO {s}.intents AS i (key, agent_run_id, step_id, tool_name, business_scope, kind, payload, payload_hash)
    SELECT p.alert_key, $1, p.key, {s}.alert_tool(), p.agent_run_id, {KindForward}, p.payload, {s}.payload_hash(p.payload)
      FROM payloads p JOIN registered r ON r.key = p.alert_key
    ON CONFLICT ON CONSTRAINT intents_key_unique DO NOTHING
    RETURNING i.seq, i.key, i.tool_name, i.business_scope, i.step_id AS failed_key,
              i.payload->>'agent_run_id' AS failed_run, i.payload->>'tool_name' AS failed_tool,
              pg_column_size(i.payload) AS payload_bytes
), queued AS (
    INSERT INTO {s}.queue AS q (seq, tool_name, business_scope, kind, payload_bytes)
    SELECT n.seq, n.tool_name, n.business_scope, {KindForward}, n.payload_bytes FROM intended n
    RETURNING q.seq
)
SELECT n.failed_key, n.failed_run, n.failed_tool FROM intended n JOIN queued USING (seq) ORDER BY n.failed_key`

// Alerted is a compensation_failed row whose alert was queued.
type Alerted struct {
	Key, Run, Tool string
}

// QueueAlerts queues the alert of each compensation_failed row of runs (nil:
// of every run) that has none yet, and returns the rows it queued one for.
func (s *Store) QueueAlerts(ctx context.Context, db DB, runs []string) ([]Alerted, error) {
	rows, err := db.Query(ctx, s.sql(queueAlertsSQL), outbox.AlertRun, runs)
	if err != nil {
		return nil, fmt.Errorf("queue compensation_failed alerts: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Alerted, error) {
		var a Alerted
		err := r.Scan(&a.Key, &a.Run, &a.Tool)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("queue compensation_failed alerts: %w", err)
	}
	return out, nil
}
