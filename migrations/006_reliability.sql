-- Floors that cannot be lost, and sagas that never wait on one another.

-- not_before is the earliest moment the provider allows the row's next
-- attempt: the Retry-After (capped by the route's max_retry_after) or the
-- backoff that the last answer put under next_attempt_at. Only the
-- completion of an attempt sets it; an operator's `requeue
-- --ignore-retry-after` clears it. Every other writer of next_attempt_at (a
-- resume, a reload, a deferral, a reclaim, a revive) may only move the row
-- to a time at or after it: the trigger below holds that line for every
-- statement, whoever writes it.
ALTER TABLE {{.schema}}.outbox ADD COLUMN not_before timestamptz;

CREATE FUNCTION {{.schema}}.keep_not_before()
RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.next_attempt_at := NEW.not_before;
    RETURN NEW;
END
$$;

-- Fires only for statements that set next_attempt_at or not_before (claims
-- do neither), and calls its function only when the floor is broken.
CREATE TRIGGER outbox_keep_not_before
    BEFORE UPDATE OF next_attempt_at, not_before ON {{.schema}}.outbox
    FOR EACH ROW
    WHEN (NEW.next_attempt_at < NEW.not_before)
    EXECUTE FUNCTION {{.schema}}.keep_not_before();

-- An abort tells the daemons which run's saga may move (channel
-- <schema>.saga, payload the run id), so they advance it at once instead of
-- at their next sweep.
CREATE OR REPLACE FUNCTION {{.schema}}.abort_run_internal(p_run text, p_reason text, p_actor text)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    n integer;
BEGIN
    INSERT INTO {{.schema}}.runs (agent_run_id, abort_reason, aborted_by)
    VALUES (p_run, p_reason, p_actor)
    ON CONFLICT (agent_run_id) DO NOTHING;

    UPDATE {{.schema}}.outbox o
       SET status = 'cancelled',
           cancel_cause = 'run_aborted',
           last_error = 'run aborted: ' || p_reason,
           updated_at = now()
     WHERE o.agent_run_id = p_run
       AND o.kind = 'forward'
       AND o.status = 'pending'
       AND o.attempts = 0;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM pg_notify('{{.schema}}.outbox', '');
    PERFORM pg_notify('{{.schema}}.saga', p_run);
    RETURN n;
END
$$;

-- Sagas that can move without a human: halted ones wait for `drainer
-- resolve`, which sets them back to waiting.
CREATE INDEX runs_active_saga_idx ON {{.schema}}.runs (agent_run_id)
    WHERE saga_state IN ('waiting', 'compensating');

-- sweep_sagas advances up to p_limit active sagas whose run id sorts after
-- p_after (a cursor: every active saga gets its turn, however many there
-- are), each in a subtransaction of its own: a saga whose step fails is
-- noted on its run and skipped, the others keep their progress. It returns
-- each run looked at with its new state ('error: …' for a failed step).
CREATE FUNCTION {{.schema}}.sweep_sagas(p_after text, p_limit integer, p_tools text[], p_comp_tools text[])
RETURNS TABLE (agent_run_id text, state text)
LANGUAGE plpgsql AS $$
DECLARE
    r       record;
    v_state text;
BEGIN
    FOR r IN SELECT x.agent_run_id AS id FROM {{.schema}}.runs x
              WHERE x.saga_state IN ('waiting', 'compensating') AND x.agent_run_id > coalesce(p_after, '')
              ORDER BY x.agent_run_id
              LIMIT p_limit
    LOOP
        BEGIN
            v_state := {{.schema}}.advance_saga(r.id, p_tools, p_comp_tools);
        EXCEPTION WHEN OTHERS THEN
            v_state := 'error: ' || SQLERRM;
            UPDATE {{.schema}}.runs x SET saga_note = 'saga step failed: ' || SQLERRM
             WHERE x.agent_run_id = r.id;
        END;
        agent_run_id := r.id;
        state := v_state;
        RETURN NEXT;
    END LOOP;
END
$$;
