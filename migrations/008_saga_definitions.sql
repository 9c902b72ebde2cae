-- One definition of what sagas share between SQL and the daemon.

-- saga_lock_key is the advisory lock of one run's saga: advance_saga tries
-- it, and the operator commands that change a run (requeue's revival,
-- resolve) take it, so a saga step and an operator never interleave.
CREATE FUNCTION {{.schema}}.saga_lock_key(p_run text)
RETURNS bigint LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT hashtextextended('drainer.saga.' || p_run, 0)
$$;

-- alert_tool is the tool_name of the alert row queued for each
-- compensation_failed row (outbox.AlertTool in the daemon; a test checks
-- they agree). Alert rows never abort a run.
CREATE FUNCTION {{.schema}}.alert_tool()
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 'drainer.compensation_failed'::text
$$;

DROP TRIGGER outbox_forward_failed ON {{.schema}}.outbox;
CREATE TRIGGER outbox_forward_failed
    AFTER UPDATE OF status ON {{.schema}}.outbox
    FOR EACH ROW
    WHEN (NEW.status = 'failed' AND OLD.status IS DISTINCT FROM 'failed' AND NEW.kind = 'forward'
          AND NEW.tool_name <> {{.schema}}.alert_tool())
    EXECUTE FUNCTION {{.schema}}.on_forward_failed();

CREATE OR REPLACE FUNCTION {{.schema}}.advance_saga(p_run text, p_tools text[], p_comp_tools text[])
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_state    text;
    f          record;
    v_comp     text;
    v_key      text;
    v_existing record;
    v_payload  jsonb;
BEGIN
    IF NOT pg_try_advisory_xact_lock({{.schema}}.saga_lock_key(p_run)) THEN
        RETURN 'busy'; -- another replica is advancing this run right now
    END IF;
    SELECT saga_state INTO v_state FROM {{.schema}}.runs WHERE agent_run_id = p_run FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'none';
    END IF;

    -- A row enqueued concurrently with the abort (neither saw the other)
    -- is cancelled here, as the abort would have done.
    UPDATE {{.schema}}.outbox o
       SET status = 'cancelled', cancel_cause = 'run_aborted', updated_at = now(),
           last_error = 'run aborted: ' || (SELECT r.abort_reason FROM {{.schema}}.runs r WHERE r.agent_run_id = p_run)
     WHERE o.agent_run_id = p_run AND o.kind = 'forward' AND o.status = 'pending' AND o.attempts = 0;

    LOOP
        -- Attempted forward rows finish first: their effect may exist.
        IF EXISTS (SELECT 1 FROM {{.schema}}.outbox o
                    WHERE o.agent_run_id = p_run AND o.kind = 'forward'
                      AND o.status IN ('pending', 'in_flight')) THEN
            v_state := 'waiting';
            EXIT;
        END IF;
        -- One compensation at a time.
        IF EXISTS (SELECT 1 FROM {{.schema}}.outbox o
                    WHERE o.agent_run_id = p_run AND o.kind = 'compensation'
                      AND o.status IN ('pending', 'in_flight')) THEN
            v_state := 'compensating';
            EXIT;
        END IF;
        -- A compensation that cannot succeed halts the saga until a human resolves it.
        IF EXISTS (SELECT 1 FROM {{.schema}}.outbox o
                    WHERE o.agent_run_id = p_run AND o.kind = 'compensation'
                      AND o.status = 'compensation_failed') THEN
            v_state := 'halted';
            EXIT;
        END IF;

        SELECT o.seq, o.key, o.step_id, o.business_scope, o.payload, o.response, m.comp
          INTO f
          FROM {{.schema}}.outbox o
          JOIN unnest(p_tools, p_comp_tools) AS m(tool, comp) ON m.tool = o.tool_name
         WHERE o.agent_run_id = p_run AND o.kind = 'forward' AND o.status = 'succeeded'
           AND m.comp IS NOT NULL AND m.comp <> ''
         ORDER BY o.seq DESC
         LIMIT 1;
        IF NOT FOUND THEN
            v_state := 'done';
            EXIT;
        END IF;

        v_comp := f.comp;
        v_key := {{.schema}}.idempotency_key(p_run, f.step_id, v_comp, f.business_scope);
        SELECT o.status, o.forward_key INTO v_existing FROM {{.schema}}.outbox o WHERE o.key = v_key;
        IF FOUND THEN
            IF v_existing.forward_key IS DISTINCT FROM f.key THEN
                -- Two forward rows of one step and scope share a compensation
                -- tool: their compensation tuples collide. Stop for a human.
                UPDATE {{.schema}}.runs
                   SET saga_note = format('compensation %s of row %s collides with the compensation of row %s (same step, scope and compensation tool)',
                                          v_key, f.key, v_existing.forward_key)
                 WHERE agent_run_id = p_run;
                v_state := 'halted';
                EXIT;
            END IF;
            IF v_existing.status IN ('succeeded', 'cancelled') THEN
                -- Undone (or resolved by a human) already: record it and go on.
                UPDATE {{.schema}}.outbox SET status = 'compensated', updated_at = now()
                 WHERE key = f.key AND status = 'succeeded';
                CONTINUE;
            END IF;
            v_state := 'compensating';
            EXIT;
        END IF;

        v_payload := jsonb_build_object('forward_key', f.key, 'forward_payload', f.payload,
                                        'forward_response', coalesce(f.response, 'null'::jsonb));
        INSERT INTO {{.schema}}.outbox
            (key, agent_run_id, step_id, tool_name, business_scope, kind, payload, payload_hash, forward_key)
        VALUES (v_key, p_run, f.step_id, v_comp, f.business_scope, 'compensation', v_payload,
                {{.schema}}.payload_hash(v_payload), f.key)
        ON CONFLICT ON CONSTRAINT outbox_key_unique DO NOTHING;
        v_state := 'compensating';
        EXIT;
    END LOOP;

    UPDATE {{.schema}}.runs
       SET saga_state = v_state, saga_updated_at = now()
     WHERE agent_run_id = p_run AND saga_state IS DISTINCT FROM v_state;
    RETURN v_state;
END
$$;
