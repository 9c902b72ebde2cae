-- complete_rows writes a batch of completions (store.Complete) and their
-- audit entries, in one statement, with the owner's rights: the daemon's
-- role appends audit entries only through it, for the changes it makes.
-- Arguments are parallel arrays, one element per row: seq, lease token,
-- new status, attempt given back (1/0), delay in ms (-1: keep
-- next_attempt_at), last error, problem (JSON), response (JSON), response
-- status, floor, attempts as claimed; p_answered says the completions
-- answer requests sent (their entries record the provider's status);
-- p_gens gives each row's generation as claimed (store.ClaimedRow.Gen).
-- Returns each row written, with its run when its saga may move.
--
-- Every row is fenced by its lease token: a worker whose lease expired and
-- was reclaimed cannot overwrite the new owner's result. A completion that
-- comes after its lease expired (its replica lost the database, or
-- stalled) is still written while the reclaimed row waits untouched:
-- pending or outcome_unknown, its reclaimed_lease the worker's token, its
-- attempts those of the worker's claim, so nobody sent it since. The
-- worker's answer is then the latest answer for the row, and it replaces
-- the reclaim's conservative floor (store.Reclaim) with the provider's own,
-- or records the success. Every completion clears reclaimed_lease, so a
-- row claimed again is never written by the old lease.
--
-- The key window: an attempt given back (nothing sent) clears the row's
-- first_attempt_at only when the claim of this lease set it (the claim
-- writes it and updated_at with the same now()): the row then never had a
-- request out. A row requeued by an operator starts again at attempts 0
-- but keeps the first attempt it had, so the key-TTL guard measures from
-- it through any later give-back; clearing it there would open a fresh
-- window for a key the provider may have forgotten.
--
-- The audit: each row whose status or attempts change gets the next entry
-- of its hash chain, appended by the same statement (ins), after the head
-- the row carries (audit_head; looked up for a row that carries none yet),
-- and the row's head moves to it. p is the row as the statement's snapshot
-- saw it, what the entry records as "from"; a row changed by someone else
-- since (its status, attempts or head differ) is not written, and counts as
-- lost. The note of a completion without a request (drainer.note) is its
-- entry's reason. Moving audit_head keeps the trigger for other writers
-- (audit_change) from running.
CREATE OR REPLACE FUNCTION {{.schema}}.complete_rows(p_seqs bigint[], p_tokens uuid[], p_statuses text[], p_give_back integer[], p_delay_ms bigint[], p_last_errors text[], p_problems text[], p_responses text[], p_codes integer[], p_floors boolean[], p_attempts integer[], p_answered boolean, p_gens smallint[])
 RETURNS TABLE(seq bigint, run text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET plan_cache_mode TO 'force_generic_plan'
 SET search_path TO '{{.schema}}', 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    v_written bigint;
    v_gens    smallint[];
BEGIN
    -- PL/pgSQL, not SQL: its statement's plan is kept between calls
    -- (a SQL function's is made anew on every call, and planning an
    -- UPDATE of every queue generation costs more than the batch). The
    -- plan is the generic one from a connection's first call
    -- (plan_cache_mode above): by default each of the first five calls
    -- would plan it anew for its own arrays, several milliseconds each.
    RETURN QUERY
    WITH done AS (
    UPDATE {{.schema}}.queue o
       SET status = u.status,
           attempts = n.attempts,
           first_attempt_at = CASE WHEN n.attempts = 0 AND o.first_attempt_at = o.updated_at THEN NULL
                                   ELSE o.first_attempt_at END,
           next_attempt_at = CASE WHEN u.delay_ms < 0 THEN o.next_attempt_at
                                  ELSE now() + u.delay_ms * interval '1 millisecond' END,
           not_before = CASE WHEN u.floor THEN now() + u.delay_ms * interval '1 millisecond'
                             ELSE o.not_before END,
           last_error = n.last_error,
           last_problem = CASE WHEN u.status = 'succeeded' THEN NULL
                               WHEN u.last_error IS NULL THEN o.last_problem
                               ELSE u.problem::jsonb END,
           response = CASE WHEN u.status = 'succeeded' THEN u.response::jsonb ELSE o.response END,
           response_status = n.response_status,
           cancel_cause = CASE WHEN u.status = 'cancelled' THEN 'run_aborted' ELSE o.cancel_cause END,
           lease_token = NULL,
           reclaimed_lease = NULL,
           lease_expires_at = NULL,
           leased_by = NULL,
           updated_at = now(),
           audit_head = CASE WHEN e.changed
                             THEN {{.schema}}.audit_hash(e.prev, i.key, e.at, e.event, p.status, u.status, n.attempts,
                                                 e.response_status, e.actor, e.reason, e.detail)
                             ELSE p.audit_head END
      FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::int[], $5::bigint[], $6::text[], $7::text[], $8::text[], $9::int[], $10::bool[], $11::int[], $13::smallint[])
           AS u(seq, token, status, give_back, delay_ms, last_error, problem, response, response_status, floor, attempts, gen)
      -- each row looked up in its own generation only (the plan prunes the
      -- others at run time): by seq alone, every generation's index
      -- would be probed for every row, twice
      JOIN {{.schema}}.queue p ON p.seq = u.seq AND p.gen = u.gen
      JOIN {{.schema}}.intents i ON i.seq = u.seq
     CROSS JOIN LATERAL (SELECT p.attempts - u.give_back AS attempts,
                                CASE WHEN u.status = 'succeeded' THEN NULL
                                     ELSE coalesce(u.last_error, p.last_error) END AS last_error,
                                CASE WHEN $12 THEN u.response_status ELSE p.response_status END AS response_status) n
     CROSS JOIN LATERAL (SELECT p.status IS DISTINCT FROM u.status OR p.attempts IS DISTINCT FROM n.attempts AS changed,
                                clock_timestamp() AS at,
                                {{.schema}}.audit_event(p.status, u.status) AS event,
                                {{.schema}}.audit_actor() AS actor,
                                coalesce(p.audit_head, {{.schema}}.audit_head(i.key)) AS prev,
                                CASE WHEN current_setting('drainer.answer', true) = 'on' AND p.status = 'in_flight'
                                     THEN n.response_status END AS response_status,
                                coalesce(nullif(current_setting('drainer.reason', true), ''),
                                         CASE WHEN p.status = 'in_flight'
                                              THEN nullif(current_setting('drainer.note', true), '') END) AS reason,
                                CASE WHEN n.last_error IS DISTINCT FROM p.last_error AND n.last_error IS NOT NULL
                                     THEN sha256(convert_to(n.last_error, 'UTF8')) END AS detail) e
     WHERE o.seq = u.seq AND o.gen = u.gen
       AND (o.lease_token = u.token
            OR (o.reclaimed_lease = u.token AND o.attempts = u.attempts
                AND o.status IN ('pending', 'outcome_unknown')))
       AND o.status = p.status AND o.attempts = p.attempts
       AND o.audit_head IS NOT DISTINCT FROM p.audit_head
    RETURNING o.seq,
           CASE WHEN u.status <> 'pending'
                 AND (o.kind = 'compensation' OR u.status = 'failed'
                      OR EXISTS (SELECT 1 FROM {{.schema}}.runs r WHERE r.agent_run_id = i.agent_run_id))
                THEN i.agent_run_id END AS run,
           e.changed, i.key, e.at, e.event, p.status AS from_status, o.status AS to_status, o.attempts,
           e.response_status, e.actor, e.reason, e.detail, e.prev, o.audit_head
    ), ins AS (
    INSERT INTO {{.schema}}.audit (key, at, event, from_status, to_status, attempts, response_status,
                           actor, reason, detail_sha256, prev_hash, hash, part)
    SELECT d.key, d.at, d.event, d.from_status, d.to_status, d.attempts, d.response_status,
           d.actor, d.reason, d.detail, d.prev, d.audit_head,
           -- read here, not by audit.part's default (a SQL function there
           -- is planned anew on every execution)
           (SELECT g.part FROM {{.schema}}.audit_generations g WHERE g.current)
      FROM done d
     WHERE d.changed
     ORDER BY d.seq
    )
    SELECT d.seq, d.run FROM done d;
    GET DIAGNOSTICS v_written = ROW_COUNT;
    IF v_written < cardinality(p_seqs) THEN
        -- A row not written: its lease is another's (lost), or it is no
        -- longer in the generation it was claimed from (rotate_queue moved
        -- it, reclaimed, while its answer was on the way; or the caller
        -- did not know it). Once more, each row looked up where it is now:
        -- the rows written above are fenced out by their cleared lease.
        SELECT array_agg(coalesce(q.gen, u.gen) ORDER BY u.ord) INTO v_gens
          FROM unnest(p_seqs, p_gens) WITH ORDINALITY AS u(seq, gen, ord)
          LEFT JOIN {{.schema}}.queue q ON q.seq = u.seq;
        IF v_gens IS DISTINCT FROM p_gens THEN
            RETURN QUERY SELECT c.seq, c.run
              FROM {{.schema}}.complete_rows(p_seqs, p_tokens, p_statuses, p_give_back, p_delay_ms, p_last_errors,
                                             p_problems, p_responses, p_codes, p_floors, p_attempts, p_answered, v_gens) c;
        END IF;
    END IF;
END
$function$;

-- The same without the generations, for the replicas of releases up to 21
-- during a rolling upgrade: each row is found where it is now.
CREATE OR REPLACE FUNCTION {{.schema}}.complete_rows(p_seqs bigint[], p_tokens uuid[], p_statuses text[], p_give_back integer[], p_delay_ms bigint[], p_last_errors text[], p_problems text[], p_responses text[], p_codes integer[], p_floors boolean[], p_attempts integer[], p_answered boolean)
 RETURNS TABLE(seq bigint, run text)
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO '{{.schema}}', 'pg_catalog', 'pg_temp'
AS $function$
    SELECT c.seq, c.run
      FROM {{.schema}}.complete_rows(p_seqs, p_tokens, p_statuses, p_give_back, p_delay_ms, p_last_errors,
                                     p_problems, p_responses, p_codes, p_floors, p_attempts, p_answered,
                                     array_fill(NULL::smallint, ARRAY[cardinality(p_seqs)])) c
$function$;

-- Not PUBLIC's: code/grants.sql grants it to the roles that may update the
-- queue.
