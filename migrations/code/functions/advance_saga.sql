-- advance_saga moves one aborted run's saga a step: attempted and parked
-- (outcome_unknown) forward rows finish first, saying so in saga_note; then
-- each succeeded forward row of a compensable tool is compensated, one at a
-- time, in reverse seq order; a compensation_failed row halts the saga
-- until `drainer resolve`. p_tools and p_comp_tools map tools to their
-- compensation tools (the daemon's routes). Compensation rows join the key
-- space like every other row. It returns the saga's state, 'busy' when
-- another replica is advancing the run, 'none' when the run is not aborted.
CREATE OR REPLACE FUNCTION {{.schema}}.advance_saga(p_run text, p_tools text[], p_comp_tools text[])
 RETURNS text
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_state    text;
    v_note     text;
    v_parked   text;
    f          record;
    v_comp     text;
    v_key      text;
    v_existing record;
    v_payload  jsonb;
    v_fresh        boolean;
    v_forward_open boolean;
    v_parked_seq   bigint;
    v_comp_open    boolean;
    v_comp_failed  boolean;
    v_next         bigint;
    v_cancelled    boolean := false;
BEGIN
    IF NOT pg_try_advisory_xact_lock({{.schema}}.saga_lock_key(p_run)) THEN
        RETURN 'busy'; -- another replica is advancing this run right now
    END IF;
    SELECT r.saga_state, r.saga_note INTO v_state, v_note FROM {{.schema}}.runs r WHERE r.agent_run_id = p_run FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'none';
    END IF;
    IF v_note LIKE 'waiting for parked step %' THEN
        v_note := NULL;
    END IF;

    LOOP
        -- The run's rows, read once a step: what stops the saga, and the
        -- newest succeeded forward row of a compensable tool. (One pass:
        -- each of the run's rows is looked up in the queue once, so a saga
        -- of n compensations reads its n rows n times, not six times n.)
        SELECT bool_or(i.kind = 'forward' AND q.status = 'pending' AND q.attempts = 0),
               bool_or(i.kind = 'forward' AND q.status IN ('pending', 'in_flight')),
               min(i.seq) FILTER (WHERE i.kind = 'forward' AND q.status = 'outcome_unknown'),
               bool_or(i.kind = 'compensation' AND q.status IN ('pending', 'in_flight')),
               bool_or(i.kind = 'compensation' AND q.status = 'compensation_failed'),
               max(i.seq) FILTER (WHERE i.kind = 'forward' AND q.status = 'succeeded'
                                    AND i.tool_name IN (SELECT m.tool FROM unnest(p_tools, p_comp_tools) AS m(tool, comp)
                                                         WHERE m.comp IS NOT NULL AND m.comp <> ''))
          INTO v_fresh, v_forward_open, v_parked_seq, v_comp_open, v_comp_failed, v_next
          FROM {{.schema}}.intents i
          JOIN {{.schema}}.queue q ON q.seq = i.seq
         WHERE i.agent_run_id = p_run;

        IF v_fresh AND NOT v_cancelled THEN
            -- A row enqueued concurrently with the abort (neither saw the
            -- other) is cancelled here, as the abort would have done.
            UPDATE {{.schema}}.queue o
               SET status = 'cancelled', cancel_cause = 'run_aborted', updated_at = now(),
                   last_error = 'run aborted: ' || (SELECT r.abort_reason FROM {{.schema}}.runs r WHERE r.agent_run_id = p_run)
              FROM {{.schema}}.intents i
             WHERE i.agent_run_id = p_run AND o.seq = i.seq AND o.kind = 'forward' AND o.status = 'pending' AND o.attempts = 0;
            v_cancelled := true;
            CONTINUE;
        END IF;
        -- Attempted forward rows finish first: their effect may exist.
        IF v_forward_open THEN
            v_state := 'waiting';
            EXIT;
        END IF;
        -- So do parked ones: their effect may exist too, and compensating
        -- around them would undo the run out of order. A human's resolve
        -- (succeeded or failed) lets the saga go on.
        IF v_parked_seq IS NOT NULL THEN
            SELECT i.key INTO v_parked FROM {{.schema}}.intents i WHERE i.seq = v_parked_seq;
            v_note := format('waiting for parked step %s (outcome_unknown): resolve it with drainer resolve before the saga compensates', v_parked);
            v_state := 'waiting';
            EXIT;
        END IF;
        -- One compensation at a time.
        IF v_comp_open THEN
            v_state := 'compensating';
            EXIT;
        END IF;
        -- A compensation that cannot succeed halts the saga until a human resolves it.
        IF v_comp_failed THEN
            v_state := 'halted';
            EXIT;
        END IF;
        IF v_next IS NULL THEN
            v_state := 'done';
            EXIT;
        END IF;

        SELECT o.seq, o.key, o.step_id, o.business_scope, o.payload, o.response, m.comp
          INTO f
          FROM {{.schema}}.outbox o
          JOIN unnest(p_tools, p_comp_tools) AS m(tool, comp) ON m.tool = o.tool_name
         WHERE o.seq = v_next AND m.comp IS NOT NULL AND m.comp <> ''
         LIMIT 1;

        v_comp := f.comp;
        v_key := {{.schema}}.idempotency_key(p_run, f.step_id, v_comp, f.business_scope);
        SELECT o.status, o.forward_key INTO v_existing FROM {{.schema}}.outbox o WHERE o.key = v_key;
        IF FOUND THEN
            IF v_existing.forward_key IS DISTINCT FROM f.key THEN
                -- Two forward rows of one step and scope share a compensation
                -- tool: their compensation tuples collide. Stop for a human.
                v_note := format('compensation %s of row %s collides with the compensation of row %s (same step, scope and compensation tool)',
                                 v_key, f.key, v_existing.forward_key);
                v_state := 'halted';
                EXIT;
            END IF;
            IF v_existing.status IN ('succeeded', 'cancelled') THEN
                -- Undone (or resolved by a human) already: record it and go on.
                UPDATE {{.schema}}.queue SET status = 'compensated', updated_at = now()
                 WHERE seq = f.seq AND status = 'succeeded';
                CONTINUE;
            END IF;
            v_state := 'compensating';
            EXIT;
        END IF;

        v_payload := jsonb_build_object('forward_key', f.key, 'forward_payload', f.payload,
                                        'forward_response', coalesce(f.response, 'null'::jsonb));
        INSERT INTO {{.schema}}.keys (key, payload_hash)
        VALUES (v_key, {{.schema}}.payload_hash(v_payload))
        ON CONFLICT (key) DO NOTHING;
        WITH i AS (
            INSERT INTO {{.schema}}.intents AS i
                (key, agent_run_id, step_id, tool_name, business_scope, kind, payload, payload_hash, forward_key)
            VALUES (v_key, p_run, f.step_id, v_comp, f.business_scope, 'compensation', v_payload,
                    {{.schema}}.payload_hash(v_payload), f.key)
            ON CONFLICT ON CONSTRAINT intents_key_unique DO NOTHING
            RETURNING i.seq, i.tool_name, i.business_scope, pg_column_size(i.payload) AS payload_bytes
        )
        INSERT INTO {{.schema}}.queue (seq, tool_name, business_scope, kind, payload_bytes)
        SELECT i.seq, i.tool_name, i.business_scope, 'compensation', i.payload_bytes FROM i;
        v_state := 'compensating';
        EXIT;
    END LOOP;

    UPDATE {{.schema}}.runs r
       SET saga_state = v_state, saga_updated_at = now(), saga_note = v_note
     WHERE r.agent_run_id = p_run
       AND (r.saga_state IS DISTINCT FROM v_state OR r.saga_note IS DISTINCT FROM v_note);
    RETURN v_state;
END
$function$;
