-- outbox: one row per intent with every column readers have always had
-- (docs/reference.md §2), the intent (intents, written once at enqueue)
-- joined to its place in the queue (queue, the narrow row the drain
-- rewrites). Writes through it go to both tables (outbox_write); the
-- engine's own statements write the tables directly.
CREATE OR REPLACE VIEW {{.schema}}.outbox AS
SELECT i.seq, i.key, i.agent_run_id, i.step_id, i.tool_name, i.business_scope, i.kind,
       i.payload, i.payload_hash, q.status, q.attempts, q.next_attempt_at, q.first_attempt_at,
       q.last_error, q.last_problem, q.response, q.response_status, q.lease_token,
       q.lease_expires_at, q.leased_by, i.forward_key, i.traceparent, q.note, q.cancel_cause,
       i.created_at, q.updated_at, q.not_before, q.reclaimed_lease
  FROM {{.schema}}.intents i
  JOIN {{.schema}}.queue q ON q.seq = i.seq;
