-- Release 19's claim (store.Claim, schema drainer, no ordered or excluded
-- tools), kept verbatim: a replica of that release sends it while this
-- release's migrations are applied.
WITH due AS MATERIALIZED (
    SELECT seq FROM drainer.queue o
     WHERE status = 'pending' AND next_attempt_at <= now()
     ORDER BY next_attempt_at, seq
     LIMIT $1
     FOR UPDATE SKIP LOCKED
), leased AS (
    UPDATE drainer.queue o
       SET status = 'in_flight',
           attempts = o.attempts + 1,
           lease_token = gen_random_uuid(),
           lease_expires_at = now() + $2 * interval '1 millisecond',
           leased_by = $3,
           first_attempt_at = coalesce(o.first_attempt_at, now()),
           updated_at = now()
      FROM due
     WHERE o.seq = due.seq
    RETURNING o.seq, o.attempts, o.lease_token, o.first_attempt_at, o.next_attempt_at
)
SELECT l.seq, i.key, i.agent_run_id, i.step_id, i.tool_name, i.business_scope, i.kind,
       i.payload, l.attempts, l.lease_token, l.first_attempt_at, now(), i.traceparent, i.forward_key, l.next_attempt_at,
       i.kind = 'forward' AND l.attempts = 1
           AND EXISTS (SELECT 1 FROM drainer.runs r WHERE r.agent_run_id = i.agent_run_id)
  FROM leased l
  JOIN drainer.intents i ON i.seq = l.seq
 ORDER BY l.next_attempt_at, l.seq;
