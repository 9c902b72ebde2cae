-- The agents' retry tax, counted where it happens: drainer.enqueue calls
-- answered created = false (a retried step), and those refused with 23505
-- (same tuple, different payload: an agent bug or a key-normalisation bug).
--
-- Counters are sequences because nextval is never rolled back: a duplicate
-- is counted even when the caller's transaction rolls back afterwards, and a
-- mismatch, which always rolls it back, is counted at all. The count is exact
-- but for two things, both over-counts: a transaction that retries its
-- enqueue counts each try, and after a database crash a sequence skips the
-- values it had logged ahead (at most 32). The created = true path, the hot
-- one, does not touch them. The daemon reads them (last_value) with its
-- other periodic gauges and exports drainer_enqueue_duplicates_total and
-- drainer_enqueue_mismatches_total.
CREATE SEQUENCE {{.schema}}.enqueue_duplicates;
CREATE SEQUENCE {{.schema}}.enqueue_mismatches;

-- Counts are read with: SELECT CASE WHEN is_called THEN last_value ELSE 0 END.

-- The counting functions run with their owner's rights (the role that ran
-- `drainer migrate`), so an agent's role needs no privilege on the
-- sequences to enqueue.
CREATE FUNCTION {{.schema}}.count_enqueue_duplicate() RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog AS $$
    SELECT nextval('{{.schema}}.enqueue_duplicates')
$$;
CREATE FUNCTION {{.schema}}.count_enqueue_mismatch() RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog AS $$
    SELECT nextval('{{.schema}}.enqueue_mismatches')
$$;

CREATE OR REPLACE FUNCTION {{.schema}}.enqueue(agent_run_id text, step_id text, tool_name text,
                                   business_scope text, payload jsonb, traceparent text DEFAULT NULL)
RETURNS TABLE (key text, created boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    v_key     text;
    v_hash    bytea;
    v_old     bytea;
    v_limit   bigint;
    v_size    bigint;
    v_aborted boolean;
    v_seq     bigint;
BEGIN
    PERFORM {{.schema}}.check_tuple(agent_run_id, step_id, tool_name, business_scope);
    IF payload IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004', MESSAGE = 'drainer.enqueue: payload must not be null';
    END IF;
    v_limit := coalesce(nullif(current_setting('drainer.max_payload_bytes', true), '')::bigint, 1048576);
    v_size := octet_length(payload::text);
    IF v_size > v_limit THEN
        RAISE EXCEPTION USING ERRCODE = '54000',
            MESSAGE = format('drainer.enqueue: payload is %s bytes, more than the limit of %s (setting drainer.max_payload_bytes)', v_size, v_limit);
    END IF;

    v_key := {{.schema}}.idempotency_key(agent_run_id, step_id, tool_name, business_scope);
    v_hash := {{.schema}}.payload_hash(payload);

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
