// Package compensations runs sagas: when an agent run is aborted (one of its
// forward rows ended failed, or the agent or an operator aborted it), each of
// its succeeded forward rows whose route names a compensation is undone, one
// at a time, in reverse enqueue order. Each undo is itself an outbox row:
// keyed by the tuple (agent_run_id, forward step_id, compensation tool_name,
// business_scope), retried with its route's policy, bounded by max_attempts.
//
// The state machine lives in SQL (runs.saga_state in migrations/schema.sql;
// advance_saga, sweep_sagas, on_forward_failed and on_compensation_succeeded
// in migrations/code/functions/): the abort is recorded in the same
// transaction as the failure (a trigger), a compensation row that succeeds
// marks its forward row compensated in the same transaction (a trigger),
// and advance_saga creates the next compensation. This package
// calls advance_saga for open sagas, and queues the alert of each
// compensation_failed row.
//
// A run's saga state is one query: SELECT * FROM drainer.sagas WHERE agent_run_id = $1.
package compensations
