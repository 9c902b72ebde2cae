-- enqueue_batch records many intents with one INSERT per table: the same
-- answers, errors and counters as calling enqueue once per intent in order,
-- but the queue's statement triggers (audit, notification) fire once per
-- batch and the checks run as set operations instead of a call per row.
--
-- Answers: one row per intent, in the intents' order (ord from 1). An
-- intent whose tuple repeats an earlier one of the same batch is answered
-- created = false with the same key (same payload) or refused (different
-- payload), as a second enqueue would be. Errors name the intent:
-- "drainer.enqueue_batch: intent 3: ...", with enqueue's SQLSTATEs (22023
-- invalid tuple or traceparent, 22004 null payload, 54000 payload too large,
-- 23505 same tuple with a different payload); an error rolls back the whole
-- batch.
--
-- Rows are inserted in the intents' order, so seq (and the per-scope order
-- of ordered tools) follows it. The key space's rows, the only rows another
-- enqueue can be waiting for, are inserted in key order instead: two batches
-- that overlap, whatever their orders, wait for one another but never
-- deadlock. (Two transactions that enqueue overlapping tuples in several
-- statements in different orders still can, as with enqueue: 40P01, which
-- the caller retries.)
CREATE OR REPLACE FUNCTION {{.schema}}.enqueue_batch(agent_run_ids text[], step_ids text[], tool_names text[], business_scopes text[], payloads jsonb[], traceparents text[] DEFAULT NULL::text[])
 RETURNS TABLE(ord integer, key text, created boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO '{{.schema}}', 'pg_catalog', 'pg_temp'
 SET jit TO 'off'
AS $function$
#variable_conflict use_column
DECLARE
    n        integer := coalesce(cardinality(agent_run_ids), 0);
    v_limit  bigint := coalesce(nullif(current_setting('drainer.max_payload_bytes', true), '')::bigint, 1048576);
    v_bad    integer;
    v_tperr  text;
    v_keys   text[];
    v_hashes bytea[];
    v_legacy bytea[];
    v_key    text;
    v_new    text[];
    v_made   text[];
    v_dups   integer;
    v_actor  text := {{.schema}}.audit_actor();
    v_reason text := nullif(current_setting('drainer.reason', true), '');
    v_gen    smallint := {{.schema}}.queue_generation(); -- once, not per row (queue.gen's default)
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
    -- words its problems as enqueue would.
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
            'drainer.enqueue_batch: intent %s: payload is %s bytes, more than the limit of %s (setting drainer.max_payload_bytes), '
            'measured as jsonb renders it (payload::text, with a space after each comma and colon), not as sent',
            v_bad, octet_length(payloads[v_bad]::text), v_limit);
    END IF;
    IF traceparents IS NOT NULL THEN
        SELECT u.i, {{.schema}}.traceparent_error(u.tp) INTO v_bad, v_tperr
          FROM unnest(traceparents) WITH ORDINALITY AS u(tp, i)
         WHERE nullif(u.tp, '') IS NOT NULL AND {{.schema}}.traceparent_error(u.tp) IS NOT NULL
         ORDER BY u.i LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('drainer.enqueue_batch: intent %s: %s', v_bad, v_tperr);
        END IF;
    END IF;

    -- Keys and payload hashes (canonical, and of the text for keys
    -- recorded before migration 015).
    SELECT array_agg({{.schema}}.intent_key(u.a, u.s, u.t, u.b) ORDER BY u.i),
           array_agg(CASE WHEN u.x ~ '\.[0-9]*0\M'
                          THEN sha256(convert_to({{.schema}}.canonical_text(u.x), 'UTF8'))
                          ELSE sha256(convert_to(u.x, 'UTF8')) END ORDER BY u.i),
           array_agg(sha256(convert_to(u.x, 'UTF8')) ORDER BY u.i)
      INTO v_keys, v_hashes, v_legacy
      FROM (SELECT w.*, w.p::text AS x
              FROM unnest(agent_run_ids, step_ids, tool_names, business_scopes, payloads)
                   WITH ORDINALITY AS w(a, s, t, b, p, i)) u;

    -- The key space decides which keys are new: the first occurrence of
    -- each, inserted in key order (a key another transaction is inserting
    -- is waited for: in the intents' order two batches that overlap in
    -- opposite orders would each wait for a key the other holds).
    WITH ins AS (
        INSERT INTO {{.schema}}.keys AS k (key, payload_hash)
        SELECT f.k, f.h
          FROM (SELECT DISTINCT ON (u.k) u.k, u.h
                  FROM unnest(v_keys, v_hashes) WITH ORDINALITY AS u(k, h, i)
                 ORDER BY u.k, u.i) f
         ORDER BY f.k COLLATE "C"
        ON CONFLICT (key) DO NOTHING
        RETURNING k.key
    )
    SELECT coalesce(array_agg(ins.key), '{}') INTO v_new FROM ins;

    IF cardinality(v_new) > 0 THEN
        WITH ins AS (
            INSERT INTO {{.schema}}.intents AS o
                (key, agent_run_id, step_id, tool_name, business_scope, kind, payload, payload_hash, traceparent)
            SELECT f.k, f.a, f.s, f.t, f.b, 'forward', f.p, f.h, nullif(f.tp, '')
              FROM (SELECT DISTINCT ON (u.k) u.*
                      FROM unnest(v_keys, v_hashes, agent_run_ids, step_ids, tool_names, business_scopes, payloads,
                                  coalesce(traceparents, array_fill(NULL::text, ARRAY[n])))
                           WITH ORDINALITY AS u(k, h, a, s, t, b, p, tp, i)
                     WHERE u.k = ANY(v_new)
                     ORDER BY u.k, u.i) f
             ORDER BY f.i
            ON CONFLICT ON CONSTRAINT intents_key_unique DO NOTHING
            RETURNING o.seq, o.key, o.agent_run_id, o.tool_name, o.business_scope, o.payload_hash,
                      pg_column_size(o.payload) AS payload_bytes -- as inserted: its whole size
        ), entries AS (
            -- each row's first audit entry: appended beside the row, whose
            -- audit_head it is (the insert trigger then stays quiet)
            SELECT ins.seq, ins.key, ins.tool_name, ins.business_scope, ins.payload_hash, ins.payload_bytes, s.status,
                   (r.agent_run_id IS NOT NULL) AS aborted, e.at, e.event, e.prev,
                   {{.schema}}.audit_hash(e.prev, ins.key, e.at, e.event, NULL, s.status, 0, NULL,
                                          v_actor, v_reason, ins.payload_hash) AS head
              FROM ins
              LEFT JOIN {{.schema}}.runs r ON r.agent_run_id = ins.agent_run_id
             CROSS JOIN LATERAL (SELECT CASE WHEN r.agent_run_id IS NOT NULL THEN 'cancelled' ELSE 'pending' END AS status) s
             CROSS JOIN LATERAL (SELECT clock_timestamp() AS at, {{.schema}}.audit_event(NULL, s.status) AS event,
                                        -- audit_head(ins.key), inline: planned once for every row;
                                        -- its anchor read FOR KEY SHARE, as audit_head reads it
                                        coalesce((SELECT a.hash FROM {{.schema}}.audit a
                                                   WHERE a.key = ins.key ORDER BY a.id + 0 DESC LIMIT 1),
                                                 (SELECT x.hash FROM {{.schema}}.audit_anchors x
                                                   WHERE x.key = ins.key FOR KEY SHARE)) AS prev) e
        ), queued AS (
            INSERT INTO {{.schema}}.queue (seq, tool_name, business_scope, kind, status, cancel_cause, last_error, audit_head, gen,
                                           payload_bytes)
            SELECT n.seq, n.tool_name, n.business_scope, 'forward', n.status,
                   CASE WHEN n.aborted THEN 'run_aborted' END,
                   CASE WHEN n.aborted THEN 'run aborted before this intent was enqueued' END,
                   n.head, v_gen, n.payload_bytes
              FROM entries n
             ORDER BY n.seq
        ), audited AS (
            INSERT INTO {{.schema}}.audit (key, at, event, from_status, to_status, attempts, response_status,
                                           actor, reason, detail_sha256, prev_hash, hash)
            SELECT n.key, n.at, n.event, NULL, n.status, 0, NULL, v_actor, v_reason, n.payload_hash, n.prev, n.head
              FROM entries n
             ORDER BY n.seq
        )
        SELECT coalesce(array_agg(ins.key), '{}') INTO v_made FROM ins;
    ELSE
        v_made := '{}';
    END IF;

    IF cardinality(v_made) < n THEN
        -- Some intents repeat a tuple (of this batch, or enqueued before):
        -- the first one whose payload differs from the tuple's recorded
        -- payload is refused, as single enqueues in order would refuse it,
        -- after counting the repeats before it. A new key whose intent
        -- existed already (written by hand) compares with that row.
        SELECT d.i, d.k INTO v_bad, v_key
          FROM unnest(v_keys, v_hashes, v_legacy) WITH ORDINALITY AS d(k, h, l, i)
          LEFT JOIN {{.schema}}.keys x ON x.key = d.k
          LEFT JOIN {{.schema}}.intents o ON o.key = d.k AND d.k = ANY(v_new) AND d.k <> ALL(v_made)
         WHERE coalesce(o.payload_hash, x.payload_hash) IS DISTINCT FROM d.h
           AND coalesce(o.payload_hash, x.payload_hash) IS DISTINCT FROM d.l
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
$function$;
