-- Release 18's completion statement (store.Complete, schema drainer, the
-- completion of requests sent), kept verbatim: a replica of that release
-- sends it while this release's migrations are applied.
UPDATE drainer.queue o
   SET status = u.status,
       attempts = o.attempts - u.give_back,
       first_attempt_at = CASE WHEN o.attempts - u.give_back = 0 THEN NULL ELSE o.first_attempt_at END,
       next_attempt_at = CASE WHEN u.delay_ms < 0 THEN o.next_attempt_at
                              ELSE now() + u.delay_ms * interval '1 millisecond' END,
       not_before = CASE WHEN u.floor THEN now() + u.delay_ms * interval '1 millisecond'
                         ELSE o.not_before END,
       last_error = CASE WHEN u.status = 'succeeded' THEN NULL ELSE coalesce(u.last_error, o.last_error) END,
       last_problem = CASE WHEN u.status = 'succeeded' THEN NULL
                           WHEN u.last_error IS NULL THEN o.last_problem
                           ELSE u.problem::jsonb END,
       response = CASE WHEN u.status = 'succeeded' THEN u.response::jsonb ELSE o.response END,
       response_status = u.response_status,
       cancel_cause = CASE WHEN u.status = 'cancelled' THEN 'run_aborted' ELSE o.cancel_cause END,
       lease_token = NULL,
       reclaimed_lease = NULL,
       lease_expires_at = NULL,
       leased_by = NULL,
       updated_at = now()
  FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::int[], $5::bigint[], $6::text[], $7::text[], $8::text[], $9::int[], $10::bool[], $11::int[])
       AS u(seq, token, status, give_back, delay_ms, last_error, problem, response, response_status, floor, attempts),
       drainer.intents i
 WHERE o.seq = u.seq AND i.seq = o.seq
   AND (o.lease_token = u.token
        OR (o.reclaimed_lease = u.token AND o.attempts = u.attempts
            AND o.status IN ('pending', 'outcome_unknown')))
RETURNING o.seq,
       CASE WHEN u.status <> 'pending'
             AND (o.kind = 'compensation' OR u.status = 'failed'
                  OR EXISTS (SELECT 1 FROM drainer.runs r WHERE r.agent_run_id = i.agent_run_id))
            THEN i.agent_run_id END
