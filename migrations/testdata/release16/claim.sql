-- release 16's claim statement, as that binary sends it ($1 limit, $2 lease
-- in ms, $3 replica).
WITH due AS MATERIALIZED (
    SELECT seq FROM drainer.outbox o
     WHERE status = 'pending' AND next_attempt_at <= now()
     ORDER BY next_attempt_at, seq
     LIMIT $1
     FOR UPDATE SKIP LOCKED
)
UPDATE drainer.outbox o
   SET status = 'in_flight',
       attempts = o.attempts + 1,
       lease_token = gen_random_uuid(),
       lease_expires_at = now() + $2 * interval '1 millisecond',
       leased_by = $3,
       first_attempt_at = coalesce(o.first_attempt_at, now()),
       updated_at = now()
  FROM due
 WHERE o.seq = due.seq
RETURNING o.seq, o.key, o.agent_run_id, o.step_id, o.tool_name, o.business_scope, o.kind,
          o.payload, o.attempts, o.lease_token, o.first_attempt_at, now(), o.traceparent, o.forward_key, o.next_attempt_at,
          o.kind = 'forward' AND o.attempts = 1
              AND EXISTS (SELECT 1 FROM drainer.runs r WHERE r.agent_run_id = o.agent_run_id)