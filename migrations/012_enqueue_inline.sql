-- enqueue, same answers and errors, less server time per call: the tuple
-- check, the key and the payload hash are evaluated inline (plpgsql's
-- simple expressions, intent_key inlined) instead of through check_tuple,
-- idempotency_key and payload_hash, which are not inlinable and cost
-- several times their bodies per call; the payload is converted to text
-- once. check_tuple still words the error when the quick check finds a
-- problem.
CREATE OR REPLACE FUNCTION {{.schema}}.enqueue(agent_run_id text, step_id text, tool_name text,
                                   business_scope text, payload jsonb, traceparent text DEFAULT NULL)
RETURNS TABLE (key text, created boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = {{.schema}}, pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
    v_key     text;
    v_text    text;
    v_hash    bytea;
    v_old     bytea;
    v_limit   bigint;
    v_size    bigint;
    v_aborted boolean;
    v_seq     bigint;
BEGIN
    IF agent_run_id IS NULL OR step_id IS NULL OR tool_name IS NULL OR business_scope IS NULL
       OR agent_run_id = '' OR step_id = '' OR tool_name = ''
       OR octet_length(agent_run_id) > 1024 OR octet_length(step_id) > 1024
       OR octet_length(tool_name) > 1024 OR octet_length(business_scope) > 1024 THEN
        PERFORM {{.schema}}.check_tuple(agent_run_id, step_id, tool_name, business_scope);
    END IF;
    IF payload IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'drainer.enqueue: payload must not be null';
    END IF;
    v_limit := coalesce(nullif(current_setting('drainer.max_payload_bytes', true), '')::bigint, 1048576);
    v_text := payload::text;
    v_size := octet_length(v_text);
    IF v_size > v_limit THEN
        RAISE EXCEPTION USING ERRCODE = '54000',
            MESSAGE = format('drainer.enqueue: payload is %s bytes, more than the limit of %s (setting drainer.max_payload_bytes)', v_size, v_limit);
    END IF;

    -- The key (intent_key, inlined; migration 011) and payload_hash's body.
    v_key := {{.schema}}.intent_key(agent_run_id, step_id, tool_name, business_scope);
    v_hash := sha256(convert_to(v_text, 'UTF8'));

    SELECT t.payload_hash INTO v_old FROM {{.schema}}.tombstones t WHERE t.key = v_key;
    IF FOUND THEN
        IF v_old <> v_hash THEN
            PERFORM {{.schema}}.count_enqueue_mismatch();
            RAISE EXCEPTION USING ERRCODE = '23505',
                MESSAGE = format('drainer.enqueue: key %s already enqueued with a different payload', v_key);
        END IF;
        PERFORM {{.schema}}.count_enqueue_duplicate();
        RETURN QUERY SELECT v_key, false;
        RETURN;
    END IF;

    v_aborted := EXISTS (SELECT 1 FROM {{.schema}}.runs r WHERE r.agent_run_id = enqueue.agent_run_id);

    INSERT INTO {{.schema}}.outbox AS o
        (key, agent_run_id, step_id, tool_name, business_scope, kind, payload, payload_hash,
         status, cancel_cause, last_error, traceparent)
    VALUES (v_key, agent_run_id, step_id, tool_name, business_scope, 'forward', payload, v_hash,
            CASE WHEN v_aborted THEN 'cancelled' ELSE 'pending' END,
            CASE WHEN v_aborted THEN 'run_aborted' END,
            CASE WHEN v_aborted THEN 'run aborted before this intent was enqueued' END,
            traceparent)
    ON CONFLICT ON CONSTRAINT outbox_key_unique DO NOTHING
    RETURNING o.seq INTO v_seq;

    IF v_seq IS NOT NULL THEN
        -- A prune may have moved this key to the tombstones while we inserted.
        SELECT t.payload_hash INTO v_old FROM {{.schema}}.tombstones t WHERE t.key = v_key;
        IF FOUND THEN
            DELETE FROM {{.schema}}.outbox o WHERE o.seq = v_seq;
            IF v_old <> v_hash THEN
                PERFORM {{.schema}}.count_enqueue_mismatch();
                RAISE EXCEPTION USING ERRCODE = '23505',
                    MESSAGE = format('drainer.enqueue: key %s already enqueued with a different payload', v_key);
            END IF;
            PERFORM {{.schema}}.count_enqueue_duplicate();
            RETURN QUERY SELECT v_key, false;
            RETURN;
        END IF;
        RETURN QUERY SELECT v_key, true;
        RETURN;
    END IF;

    SELECT o.payload_hash INTO v_old FROM {{.schema}}.outbox o WHERE o.key = v_key;
    IF NOT FOUND THEN
        SELECT t.payload_hash INTO v_old FROM {{.schema}}.tombstones t WHERE t.key = v_key;
    END IF;
    IF v_old IS DISTINCT FROM v_hash THEN
        PERFORM {{.schema}}.count_enqueue_mismatch();
        RAISE EXCEPTION USING ERRCODE = '23505',
            MESSAGE = format('drainer.enqueue: key %s already enqueued with a different payload', v_key);
    END IF;
    PERFORM {{.schema}}.count_enqueue_duplicate();
    RETURN QUERY SELECT v_key, false;
END
$$;
