-- enqueue_batch records many intents with one INSERT: the same answers,
-- errors and counters as calling enqueue once per intent in order, but the
-- outbox's statement triggers (audit, notification) fire once per batch and
-- the checks run as set operations instead of a function call per row.
--
-- Answers: one row per intent, in the intents' order (ord from 1). An
-- intent whose tuple repeats an earlier one of the same batch is answered
-- created = false with the same key (same payload) or refused (different
-- payload), as a second enqueue would be. Errors name the intent:
-- "drainer.enqueue_batch: intent 3: ...", with enqueue's SQLSTATEs (22023
-- invalid tuple, 22004 null payload, 54000 payload too large, 23505 same
-- tuple with a different payload); an error rolls back the whole batch.
--
-- Rows are inserted in the intents' order, so seq (and the per-scope order
-- of ordered tools) follows it. Two transactions that enqueue overlapping
-- batches in different orders can deadlock (40P01, retried by the caller),
-- as two transactions calling enqueue in different orders can.
-- intent_key is idempotency_key (with canonical_tuple) in one expression,
-- declared STABLE, which is what its body is (to_json, convert_to): the
-- planner then inlines it where enqueue and enqueue_batch call it, instead
-- of running it as a function call per intent (a non-inlinable SQL function
-- costs ten times its body). idempotency_key keeps its IMMUTABLE
-- declaration for callers that index it. The key vectors are checked
-- through both.
CREATE FUNCTION {{.schema}}.intent_key(agent_run_id text, step_id text, tool_name text, business_scope text)
RETURNS text LANGUAGE sql STABLE STRICT PARALLEL SAFE AS $$
    SELECT 'idem_v1_' || left(encode(sha256(convert_to(
        '{"agent_run_id":' || to_json($1)::text || ',"business_scope":' || to_json($4)::text
        || ',"step_id":' || to_json($2)::text || ',"tool_name":' || to_json($3)::text || '}',
        'UTF8')), 'hex'), 32)
$$;

CREATE FUNCTION {{.schema}}.enqueue_batch(agent_run_ids text[], step_ids text[], tool_names text[],
                                         business_scopes text[], payloads jsonb[], traceparents text[] DEFAULT NULL)
RETURNS TABLE (ord integer, key text, created boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = {{.schema}}, pg_catalog, pg_temp SET jit = off AS $$
#variable_conflict use_column
DECLARE
    n        integer := coalesce(cardinality(agent_run_ids), 0);
    v_limit  bigint := coalesce(nullif(current_setting('drainer.max_payload_bytes', true), '')::bigint, 1048576);
    v_bad    integer;
    v_keys   text[];
    v_hashes bytea[];
    v_key    text;
    v_seqs   bigint[];
    v_made   text[];
    v_gone   text[];
    v_dups   integer;
BEGIN
    IF coalesce(cardinality(step_ids), 0) <> n OR coalesce(cardinality(tool_names), 0) <> n
       OR coalesce(cardinality(business_scopes), 0) <> n OR coalesce(cardinality(payloads), 0) <> n
       OR (traceparents IS NOT NULL AND cardinality(traceparents) <> n) THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format(
            'drainer.enqueue_batch: the arrays must have one element per intent: agent_run_ids %s, step_ids %s, tool_names %s, business_scopes %s, payloads %s, traceparents %s',
            n, coalesce(cardinality(step_ids), 0), coalesce(cardinality(tool_names), 0),
            coalesce(cardinality(business_scopes), 0), coalesce(cardinality(payloads), 0),
            coalesce(cardinality(traceparents)::text, 'null'));
    END IF;
    IF n = 0 THEN
        RETURN;
    END IF;

    -- The first invalid intent, found with one scan; check_tuple then
    -- words its problems as enqueue would. (Invalid intents are refused
    -- before any other check: the Go, Python and TypeScript producers
    -- validate every intent before they call this.)
    SELECT min(u.i) INTO v_bad
      FROM unnest(agent_run_ids, step_ids, tool_names, business_scopes, payloads) WITH ORDINALITY AS u(a, s, t, b, p, i)
     WHERE u.a IS NULL OR u.s IS NULL OR u.t IS NULL OR u.b IS NULL OR u.a = '' OR u.s = '' OR u.t = ''
        OR octet_length(u.a) > 1024 OR octet_length(u.s) > 1024 OR octet_length(u.t) > 1024 OR octet_length(u.b) > 1024
        OR u.p IS NULL OR octet_length(u.p::text) > v_limit;
    IF v_bad IS NOT NULL THEN
        BEGIN
            PERFORM {{.schema}}.check_tuple(agent_run_ids[v_bad], step_ids[v_bad], tool_names[v_bad], business_scopes[v_bad]);
        EXCEPTION WHEN invalid_parameter_value THEN
            RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('drainer.enqueue_batch: intent %s: %s', v_bad,
                replace(SQLERRM, 'drainer.enqueue: ', ''));
        END;
        IF payloads[v_bad] IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = '22004',
                MESSAGE = format('drainer.enqueue_batch: intent %s: payload must not be null', v_bad);
        END IF;
        RAISE EXCEPTION USING ERRCODE = '54000', MESSAGE = format(
            'drainer.enqueue_batch: intent %s: payload is %s bytes, more than the limit of %s (setting drainer.max_payload_bytes)',
            v_bad, octet_length(payloads[v_bad]::text), v_limit);
    END IF;

    -- Keys and payload hashes, inline (intent_key; payload_hash's body).
    SELECT array_agg({{.schema}}.intent_key(u.a, u.s, u.t, u.b) ORDER BY u.i),
           array_agg(sha256(convert_to(u.p::text, 'UTF8')) ORDER BY u.i)
      INTO v_keys, v_hashes
      FROM unnest(agent_run_ids, step_ids, tool_names, business_scopes, payloads) WITH ORDINALITY AS u(a, s, t, b, p, i);

    -- The first occurrence of each new key, in the intents' order; keys
    -- already pruned to the tombstones are not inserted again.
    WITH ins AS (
        INSERT INTO {{.schema}}.outbox AS o
            (key, agent_run_id, step_id, tool_name, business_scope, kind, payload, payload_hash,
             status, cancel_cause, last_error, traceparent)
        SELECT f.k, f.a, f.s, f.t, f.b, 'forward', f.p, f.h,
               CASE WHEN r.agent_run_id IS NOT NULL THEN 'cancelled' ELSE 'pending' END,
               CASE WHEN r.agent_run_id IS NOT NULL THEN 'run_aborted' END,
               CASE WHEN r.agent_run_id IS NOT NULL THEN 'run aborted before this intent was enqueued' END,
               f.tp
          FROM (SELECT DISTINCT ON (u.k) u.*
                  FROM unnest(v_keys, v_hashes, agent_run_ids, step_ids, tool_names, business_scopes, payloads,
                              coalesce(traceparents, array_fill(NULL::text, ARRAY[n])))
                       WITH ORDINALITY AS u(k, h, a, s, t, b, p, tp, i)
                 ORDER BY u.k, u.i) f
          LEFT JOIN {{.schema}}.runs r ON r.agent_run_id = f.a
         WHERE NOT EXISTS (SELECT 1 FROM {{.schema}}.tombstones x WHERE x.key = f.k)
         ORDER BY f.i
        ON CONFLICT ON CONSTRAINT outbox_key_unique DO NOTHING
        RETURNING o.seq, o.key
    )
    SELECT array_agg(ins.seq), coalesce(array_agg(ins.key), '{}') INTO v_seqs, v_made FROM ins;

    IF v_seqs IS NOT NULL THEN
        -- A prune may have moved one of these keys to the tombstones while
        -- we inserted: that intent was enqueued before, and is not again.
        WITH gone AS (
            DELETE FROM {{.schema}}.outbox o
             USING {{.schema}}.tombstones x
             WHERE o.seq = ANY(v_seqs) AND x.key = o.key
            RETURNING o.key
        )
        SELECT array_agg(gone.key) INTO v_gone FROM gone;
        IF v_gone IS NOT NULL THEN
            SELECT coalesce(array_agg(m), '{}') INTO v_made FROM unnest(v_made) AS m WHERE m <> ALL(v_gone);
        END IF;
    END IF;

    IF cardinality(v_made) < n THEN
        -- Some intents repeat a tuple (of this batch, or enqueued before):
        -- the first one whose payload differs from the tuple's stored
        -- payload (pruned to the tombstones, in the outbox, or inserted
        -- just now for its first occurrence) is refused, as single enqueues
        -- in order would refuse it, after counting the repeats before it.
        SELECT d.i, d.k INTO v_bad, v_key
          FROM unnest(v_keys, v_hashes) WITH ORDINALITY AS d(k, h, i)
          LEFT JOIN {{.schema}}.tombstones x ON x.key = d.k
          LEFT JOIN {{.schema}}.outbox o ON o.key = d.k
         WHERE coalesce(x.payload_hash, o.payload_hash) IS DISTINCT FROM d.h
         ORDER BY d.i
         LIMIT 1;
        IF FOUND THEN
            PERFORM {{.schema}}.count_enqueue_duplicate()
               FROM (SELECT u.i, u.k, row_number() OVER (PARTITION BY u.k ORDER BY u.i) AS nth
                       FROM unnest(v_keys) WITH ORDINALITY AS u(k, i)) d
               LEFT JOIN unnest(v_made) AS m(k) ON m.k = d.k
              WHERE d.i < v_bad AND (m.k IS NULL OR d.nth > 1);
            PERFORM {{.schema}}.count_enqueue_mismatch();
            RAISE EXCEPTION USING ERRCODE = '23505',
                MESSAGE = format('drainer.enqueue_batch: intent %s: key %s already enqueued with a different payload', v_bad, v_key);
        END IF;
    END IF;

    -- Answers: created for the first occurrence of each inserted key.
    RETURN QUERY
        SELECT f.i::integer, f.k, (m.k IS NOT NULL AND f.nth = 1)
          FROM (SELECT u.k, u.i, row_number() OVER (PARTITION BY u.k ORDER BY u.i) AS nth
                  FROM unnest(v_keys) WITH ORDINALITY AS u(k, i)) f
          LEFT JOIN unnest(v_made) AS m(k) ON m.k = f.k
         ORDER BY f.i;
    v_dups := n - cardinality(v_made);
    IF v_dups > 0 THEN
        PERFORM {{.schema}}.count_enqueue_duplicate() FROM generate_series(1, v_dups);
    END IF;
END
$$;

-- Like enqueue (migration 009): nobody runs it unless granted, and a role
-- that may run enqueue may run enqueue_batch (deploy/sql/roles.sql grants
-- both to the producer role).
REVOKE EXECUTE ON FUNCTION {{.schema}}.enqueue_batch(text[], text[], text[], text[], jsonb[], text[]) FROM PUBLIC;
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT DISTINCT e.grantee
          FROM pg_catalog.pg_proc p
         CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) e
         WHERE p.oid = '{{.schema}}.enqueue(text, text, text, text, jsonb, text)'::regprocedure
           AND e.privilege_type = 'EXECUTE' AND e.grantee <> p.proowner
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION {{.schema}}.enqueue_batch(text[], text[], text[], text[], jsonb[], text[]) TO %s',
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE g.grantee::regrole::text END);
    END LOOP;
END
$$;
