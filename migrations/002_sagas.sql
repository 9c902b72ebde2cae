-- Sagas: compensation of an aborted run's succeeded steps, one at a time in
-- reverse enqueue order (docs/reference.md §6).

ALTER TABLE {{.schema}}.runs
    ADD COLUMN saga_state text NOT NULL DEFAULT 'waiting',
    ADD COLUMN saga_note text,
    ADD COLUMN saga_updated_at timestamptz NOT NULL DEFAULT now(),
    ADD CONSTRAINT runs_saga_state_check CHECK (saga_state IN ('waiting', 'compensating', 'halted', 'done'));

CREATE INDEX runs_open_saga_idx ON {{.schema}}.runs (saga_updated_at) WHERE saga_state <> 'done';

-- A compensation row that succeeded marks its forward row compensated, in the
-- same transaction.
CREATE FUNCTION {{.schema}}.on_compensation_succeeded()
RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE {{.schema}}.outbox f
       SET status = 'compensated', updated_at = now()
     WHERE f.key = NEW.forward_key AND f.status = 'succeeded';
    PERFORM pg_notify('{{.schema}}.outbox', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER outbox_compensation_succeeded
    AFTER UPDATE OF status ON {{.schema}}.outbox
    FOR EACH ROW
    WHEN (NEW.kind = 'compensation' AND NEW.status = 'succeeded' AND OLD.status IS DISTINCT FROM 'succeeded')
    EXECUTE FUNCTION {{.schema}}.on_compensation_succeeded();

-- Alert rows (tool drainer.compensation_failed) never abort a run.
DROP TRIGGER outbox_forward_failed ON {{.schema}}.outbox;
CREATE TRIGGER outbox_forward_failed
    AFTER UPDATE OF status ON {{.schema}}.outbox
    FOR EACH ROW
    WHEN (NEW.status = 'failed' AND OLD.status IS DISTINCT FROM 'failed' AND NEW.kind = 'forward'
          AND NEW.tool_name <> 'drainer.compensation_failed')
    EXECUTE FUNCTION {{.schema}}.on_forward_failed();

-- advance_saga moves one aborted run's saga forward by at most one step and
-- returns its state. p_tools[i] is compensated by p_comp_tools[i] (from the
-- routes' `compensation`). Safe to call from any number of replicas at once:
-- it serialises on the run, and compensation keys derive from their tuple so
-- a row is never created twice.
CREATE FUNCTION {{.schema}}.advance_saga(p_run text, p_tools text[], p_comp_tools text[])
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_state    text;
    f          record;
    v_comp     text;
    v_key      text;
    v_existing record;
    v_payload  jsonb;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtextextended('drainer.saga.' || p_run, 0)) THEN
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

-- sagas: one row per aborted run with its saga state and counts, readable
-- with one query: SELECT * FROM drainer.sagas WHERE agent_run_id = $1.
CREATE VIEW {{.schema}}.sagas AS
SELECT r.agent_run_id,
       r.saga_state,
       r.saga_note,
       r.aborted_at,
       r.abort_reason,
       r.aborted_by,
       count(*) FILTER (WHERE o.kind = 'forward' AND o.status IN ('pending', 'in_flight'))  AS forward_open,
       count(*) FILTER (WHERE o.kind = 'forward' AND o.status = 'succeeded')               AS forward_succeeded,
       count(*) FILTER (WHERE o.kind = 'forward' AND o.status = 'compensated')             AS forward_compensated,
       count(*) FILTER (WHERE o.kind = 'forward' AND o.status = 'failed')                  AS forward_failed,
       count(*) FILTER (WHERE o.kind = 'forward' AND o.status = 'cancelled')               AS forward_cancelled,
       count(*) FILTER (WHERE o.kind = 'compensation' AND o.status IN ('pending', 'in_flight')) AS compensations_open,
       count(*) FILTER (WHERE o.kind = 'compensation' AND o.status = 'succeeded')          AS compensations_succeeded,
       count(*) FILTER (WHERE o.kind = 'compensation' AND o.status = 'compensation_failed') AS compensations_failed,
       r.saga_updated_at
  FROM {{.schema}}.runs r
  LEFT JOIN {{.schema}}.outbox o ON o.agent_run_id = r.agent_run_id
 GROUP BY r.agent_run_id;
