-- enqueue records one intent in the caller's transaction and returns its key
-- and whether it was created (docs/reference.md §2). The key space decides
-- whether the tuple is new: enqueue inserts into keys first, so a unique
-- check, not the caller's snapshot, answers (a key committed after a
-- REPEATABLE READ or SERIALIZABLE snapshot raises 40001, and the retry
-- answers created = false); a tuple enqueued before with another payload
-- (compared as JSON values) is refused with 23505. An intent of an aborted
-- run is created cancelled. The tuple check, the key and the hash are
-- evaluated inline (check_tuple only words an error); the payload is
-- converted to text once. Keys recorded before migration 015 keep the hash
-- of the payload's text, which is accepted too.
CREATE OR REPLACE FUNCTION {{.schema}}.enqueue(agent_run_id text, step_id text, tool_name text, business_scope text, payload jsonb, traceparent text DEFAULT NULL::text)
 RETURNS TABLE(key text, created boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO '{{.schema}}', 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_variable
DECLARE
    v_key     text;
    v_text    text;
    v_hash    bytea;
    v_legacy  bytea;
    v_old     bytea;
    v_limit   bigint;
    v_size    bigint;
    v_aborted boolean;
    v_seq     bigint;
    v_tp      text := nullif(traceparent, '');
    v_status  text;
    v_at      timestamptz;
    v_actor   text;
    v_reason  text;
    v_event   text;
    v_prev    bytea;
    v_head    bytea;
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
    IF v_tp IS NOT NULL AND {{.schema}}.traceparent_error(v_tp) IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = 'drainer.enqueue: ' || {{.schema}}.traceparent_error(v_tp);
    END IF;
    -- The limit is on what is stored and sent: jsonb's text rendering, not
    -- the caller's text (a compact [1,1] is 5 bytes, rendered [1, 1] 6).
    v_limit := coalesce(nullif(current_setting('drainer.max_payload_bytes', true), '')::bigint, 1048576);
    v_text := payload::text;
    v_size := octet_length(v_text);
    IF v_size > v_limit THEN
        RAISE EXCEPTION USING ERRCODE = '54000',
            MESSAGE = format('drainer.enqueue: payload is %s bytes, more than the limit of %s (setting drainer.max_payload_bytes), '
                             'measured as jsonb renders it (payload::text, with a space after each comma and colon), not as sent',
                             v_size, v_limit);
    END IF;

    v_key := {{.schema}}.intent_key(agent_run_id, step_id, tool_name, business_scope);
    v_legacy := sha256(convert_to(v_text, 'UTF8'));
    v_hash := CASE WHEN v_text ~ '\.[0-9]*0\M'
                   THEN sha256(convert_to({{.schema}}.canonical_text(v_text), 'UTF8'))
                   ELSE v_legacy END;

    INSERT INTO {{.schema}}.keys AS k (key, payload_hash) VALUES (v_key, v_hash)
    ON CONFLICT ON CONSTRAINT keys_pkey DO NOTHING;
    IF FOUND THEN
        v_aborted := EXISTS (SELECT 1 FROM {{.schema}}.runs r WHERE r.agent_run_id = enqueue.agent_run_id);
        v_status := CASE WHEN v_aborted THEN 'cancelled' ELSE 'pending' END;
        -- The chain's first entry, appended below with the row, which
        -- carries its hash as audit_head (the insert trigger then stays
        -- quiet).
        v_at := clock_timestamp();
        v_actor := {{.schema}}.audit_actor();
        v_reason := nullif(current_setting('drainer.reason', true), '');
        v_event := {{.schema}}.audit_event(NULL, v_status);
        v_prev := {{.schema}}.audit_head(v_key);
        v_head := {{.schema}}.audit_hash(v_prev, v_key, v_at, v_event, NULL, v_status, 0, NULL, v_actor, v_reason, v_hash);
        WITH i AS (
            INSERT INTO {{.schema}}.intents AS i
                (key, agent_run_id, step_id, tool_name, business_scope, kind, payload, payload_hash, traceparent)
            VALUES (v_key, agent_run_id, step_id, tool_name, business_scope, 'forward', payload, v_hash, v_tp)
            ON CONFLICT ON CONSTRAINT intents_key_unique DO NOTHING
            RETURNING i.seq, i.tool_name, i.business_scope, pg_column_size(i.payload) AS payload_bytes -- as inserted: its whole size
        )
        -- The generation is read here rather than by queue.gen's default
        -- (a SQL function in a default is planned anew on every
        -- execution), and so is the audit's below.
        INSERT INTO {{.schema}}.queue AS q (seq, gen, tool_name, business_scope, kind, status, cancel_cause, last_error,
                                            audit_head, payload_bytes)
        SELECT i.seq, (SELECT g.gen FROM {{.schema}}.queue_generations g WHERE g.current),
               i.tool_name, i.business_scope, 'forward', v_status,
               CASE WHEN v_aborted THEN 'run_aborted' END,
               CASE WHEN v_aborted THEN 'run aborted before this intent was enqueued' END,
               v_head, i.payload_bytes
          FROM i
        RETURNING q.seq INTO v_seq;
        IF v_seq IS NOT NULL THEN
            INSERT INTO {{.schema}}.audit (key, at, event, from_status, to_status, attempts, response_status,
                                           actor, reason, detail_sha256, prev_hash, hash, part)
            VALUES (v_key, v_at, v_event, NULL, v_status, 0, NULL, v_actor, v_reason, v_hash, v_prev, v_head,
                    (SELECT a.part FROM {{.schema}}.audit_generations a WHERE a.current));
            RETURN QUERY SELECT v_key, true;
            RETURN;
        END IF;
        -- An intent the key space did not know (written by hand): its
        -- hash is the stored one.
        SELECT i.payload_hash INTO v_old FROM {{.schema}}.intents i WHERE i.key = v_key;
    ELSE
        SELECT k.payload_hash INTO v_old FROM {{.schema}}.keys k WHERE k.key = v_key;
    END IF;

    IF v_old IS DISTINCT FROM v_hash AND v_old IS DISTINCT FROM v_legacy THEN
        PERFORM {{.schema}}.count_enqueue_mismatch();
        RAISE EXCEPTION USING ERRCODE = '23505',
            MESSAGE = format('drainer.enqueue: key %s already enqueued with a different payload', v_key);
    END IF;
    PERFORM {{.schema}}.count_enqueue_duplicate();
    RETURN QUERY SELECT v_key, false;
END
$function$;
