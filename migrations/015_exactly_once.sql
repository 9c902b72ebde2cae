-- Exactly-once whatever the producer's isolation level and whatever the
-- daemon prunes meanwhile (docs/reference.md §2, §6).
--
-- 1. One key space that a unique check decides. Before, enqueue looked for a
--    pruned key in the tombstones with a plain read, which a REPEATABLE READ
--    or SERIALIZABLE producer makes through a snapshot older than the prune:
--    it saw neither the tombstone nor the deleted row, and inserted the key
--    again. Now every key has a row in `keys` from its enqueue until its
--    tombstone expires (pruning marks it instead of moving it), and enqueue
--    inserts there first: the primary key decides. A key committed after the
--    caller's snapshot makes the insert raise 40001 under REPEATABLE READ
--    and SERIALIZABLE (the caller retries, and then sees it); under READ
--    COMMITTED the insert waits for it and answers created = false.
--    `tombstones` stays readable (and deletable, for daemons of release 14)
--    as a view of the pruned keys.
-- 2. Payload equality as JSON values: the payload hash is taken over the
--    canonical form, numbers with trailing fractional zeros trimmed
--    ({"a":1.0} equals {"a":1}); jsonb already fixes key order, duplicate
--    keys and white space. Keys recorded before this migration keep their
--    hash of the text form, which is still accepted.
-- 3. A traceparent that is not a W3C trace context is refused at enqueue.
-- 4. Aborts are all remembered: an agent's or an operator's abort of a run
--    that a failed row already aborted is counted on the run
--    (abort_requests) and recorded on the run's audit chain, so requeueing
--    the failed row can no longer revive a run somebody gave up on.
-- 5. An abort is remembered as long as the tombstones of its run's keys:
--    pruning a run's rows stamps runs.rows_pruned_at, and a run is forgotten
--    only a tombstone age after that.
-- 6. Retention keeps what a saga needs: prune_rows with the compensable
--    tools and their compensation_window leaves a succeeded forward row of
--    such a tool until its run's saga has settled or its window passed.
-- 7. A parked step holds its saga: advance_saga waits while a forward row
--    of the run is outcome_unknown (its effect may exist), and says so in
--    saga_note, instead of compensating the earlier steps around it.

-- 1. The key space.
CREATE TABLE {{.schema}}.keys (
    key          text PRIMARY KEY,
    payload_hash bytea NOT NULL,
    -- Set when the outbox row is pruned: the key is then a tombstone.
    final_status text,
    pruned_at    timestamptz
);
CREATE INDEX keys_pruned_idx ON {{.schema}}.keys (pruned_at) WHERE pruned_at IS NOT NULL;

-- 2. canonical_payload is payload as a JSON value: numbers with their
-- trailing fractional zeros trimmed. Equal JSON values have equal canonical
-- text. (Numbers are compared exactly as decimals: two numbers that differ
-- past a double's precision stay different.)
CREATE FUNCTION {{.schema}}.canonical_payload(payload jsonb)
RETURNS jsonb LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE jsonb_typeof(payload)
        WHEN 'number' THEN to_jsonb(trim_scale(payload::numeric))
        WHEN 'object' THEN coalesce((SELECT jsonb_object_agg(e.k, {{.schema}}.canonical_payload(e.v))
                                       FROM jsonb_each(payload) AS e(k, v)), '{}'::jsonb)
        WHEN 'array' THEN coalesce((SELECT jsonb_agg({{.schema}}.canonical_payload(e.v) ORDER BY e.i)
                                      FROM jsonb_array_elements(payload) WITH ORDINALITY AS e(v, i)), '[]'::jsonb)
        ELSE payload END
$$;

-- payload_text is the text the payload hash is taken over: jsonb's own text
-- when it holds no number with a trailing fractional zero (the quick test
-- may also match inside a string, which only costs the slow path), else the
-- canonical payload's.
CREATE FUNCTION {{.schema}}.payload_text(payload jsonb)
RETURNS text LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE WHEN payload::text ~ '\.[0-9]*0\M' THEN {{.schema}}.canonical_payload(payload)::text
                ELSE payload::text END
$$;

CREATE OR REPLACE FUNCTION {{.schema}}.payload_hash(payload jsonb)
RETURNS bytea LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT sha256(convert_to({{.schema}}.payload_text(payload), 'UTF8'))
$$;

-- 3. traceparent_error words why tp is not a W3C traceparent (version 00
-- form: version-trace_id-parent_id-flags, lowercase hex, no all-zero ids,
-- version ff invalid), or returns null when it is one.
CREATE FUNCTION {{.schema}}.traceparent_error(tp text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN tp IS NULL THEN NULL
        WHEN tp !~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$' THEN
            format('traceparent %s is not a W3C trace context (version-trace_id-parent_id-flags in lowercase hex, e.g. 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01)',
                   quote_literal(left(tp, 80)))
        WHEN left(tp, 2) = 'ff' THEN format('traceparent %s has the invalid version ff', quote_literal(tp))
        WHEN substr(tp, 4, 32) = repeat('0', 32) THEN format('traceparent %s has an all-zero trace id', quote_literal(tp))
        WHEN substr(tp, 37, 16) = repeat('0', 16) THEN format('traceparent %s has an all-zero parent id', quote_literal(tp))
    END
$$;

-- The key space starts with every key there is: live rows (their hash
-- taken again in the canonical form) and tombstones (their hash as it was).
INSERT INTO {{.schema}}.keys (key, payload_hash)
SELECT o.key, {{.schema}}.payload_hash(o.payload) FROM {{.schema}}.outbox o
ON CONFLICT (key) DO NOTHING;
INSERT INTO {{.schema}}.keys (key, payload_hash, final_status, pruned_at)
SELECT t.key, t.payload_hash, t.final_status, t.pruned_at FROM {{.schema}}.tombstones t
ON CONFLICT (key) DO UPDATE SET final_status = excluded.final_status, pruned_at = excluded.pruned_at;

-- Whoever could use the tombstones may use the key space and its view.
CREATE TEMPORARY TABLE drainer_015_grants ON COMMIT DROP AS
SELECT e.grantee, e.privilege_type
  FROM pg_catalog.pg_class c
 CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) e
 WHERE c.oid = '{{.schema}}.tombstones'::regclass AND e.grantee <> c.relowner;

DROP TABLE {{.schema}}.tombstones;
CREATE VIEW {{.schema}}.tombstones AS
    SELECT k.key, k.payload_hash, k.final_status, k.pruned_at
      FROM {{.schema}}.keys k
     WHERE k.pruned_at IS NOT NULL;

DO $$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT * FROM drainer_015_grants LOOP
        EXECUTE format('GRANT %s ON TABLE {{.schema}}.keys, {{.schema}}.tombstones TO %s', g.privilege_type,
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE g.grantee::regrole::text END);
    END LOOP;
END
$$;

-- 4 and 5. What a run's abort remembers.
ALTER TABLE {{.schema}}.runs
    ADD COLUMN abort_requests integer NOT NULL DEFAULT 0,
    ADD COLUMN rows_pruned_at timestamptz;
-- Aborts recorded before this migration by an operator count as requests.
UPDATE {{.schema}}.runs r SET abort_requests = 1
 WHERE r.aborted_by <> 'drainer'
    OR EXISTS (SELECT 1 FROM {{.schema}}.audit a WHERE a.key = 'run:' || r.agent_run_id AND a.event = 'operator:abort');

-- enqueue: the key space decides (1), payloads compare as JSON values (2),
-- traceparents are checked (3). Answers, errors and counters are as before.
CREATE OR REPLACE FUNCTION {{.schema}}.enqueue(agent_run_id text, step_id text, tool_name text,
                                   business_scope text, payload jsonb, traceparent text DEFAULT NULL)
RETURNS TABLE (key text, created boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = {{.schema}}, pg_catalog, pg_temp AS $$
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
    v_limit := coalesce(nullif(current_setting('drainer.max_payload_bytes', true), '')::bigint, 1048576);
    v_text := payload::text;
    v_size := octet_length(v_text);
    IF v_size > v_limit THEN
        RAISE EXCEPTION USING ERRCODE = '54000',
            MESSAGE = format('drainer.enqueue: payload is %s bytes, more than the limit of %s (setting drainer.max_payload_bytes)', v_size, v_limit);
    END IF;

    v_key := {{.schema}}.intent_key(agent_run_id, step_id, tool_name, business_scope);
    v_legacy := sha256(convert_to(v_text, 'UTF8'));
    v_hash := CASE WHEN v_text ~ '\.[0-9]*0\M'
                   THEN sha256(convert_to({{.schema}}.canonical_payload(payload)::text, 'UTF8'))
                   ELSE v_legacy END;

    INSERT INTO {{.schema}}.keys AS k (key, payload_hash) VALUES (v_key, v_hash)
    ON CONFLICT ON CONSTRAINT keys_pkey DO NOTHING;
    IF FOUND THEN
        v_aborted := EXISTS (SELECT 1 FROM {{.schema}}.runs r WHERE r.agent_run_id = enqueue.agent_run_id);
        INSERT INTO {{.schema}}.outbox AS o
            (key, agent_run_id, step_id, tool_name, business_scope, kind, payload, payload_hash,
             status, cancel_cause, last_error, traceparent)
        VALUES (v_key, agent_run_id, step_id, tool_name, business_scope, 'forward', payload, v_hash,
                CASE WHEN v_aborted THEN 'cancelled' ELSE 'pending' END,
                CASE WHEN v_aborted THEN 'run_aborted' END,
                CASE WHEN v_aborted THEN 'run aborted before this intent was enqueued' END,
                v_tp)
        ON CONFLICT ON CONSTRAINT outbox_key_unique DO NOTHING
        RETURNING o.seq INTO v_seq;
        IF v_seq IS NOT NULL THEN
            RETURN QUERY SELECT v_key, true;
            RETURN;
        END IF;
        -- An outbox row the key space did not know (written by hand):
        -- its hash is the stored one.
        SELECT o.payload_hash INTO v_old FROM {{.schema}}.outbox o WHERE o.key = v_key;
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
$$;

-- enqueue_batch: as enqueue, for many intents in one statement each.
CREATE OR REPLACE FUNCTION {{.schema}}.enqueue_batch(agent_run_ids text[], step_ids text[], tool_names text[],
                                         business_scopes text[], payloads jsonb[], traceparents text[] DEFAULT NULL)
RETURNS TABLE (ord integer, key text, created boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = {{.schema}}, pg_catalog, pg_temp SET jit = off AS $$
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
            'drainer.enqueue_batch: intent %s: payload is %s bytes, more than the limit of %s (setting drainer.max_payload_bytes)',
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
                          THEN sha256(convert_to({{.schema}}.canonical_payload(u.p)::text, 'UTF8'))
                          ELSE sha256(convert_to(u.x, 'UTF8')) END ORDER BY u.i),
           array_agg(sha256(convert_to(u.x, 'UTF8')) ORDER BY u.i)
      INTO v_keys, v_hashes, v_legacy
      FROM (SELECT w.*, w.p::text AS x
              FROM unnest(agent_run_ids, step_ids, tool_names, business_scopes, payloads)
                   WITH ORDINALITY AS w(a, s, t, b, p, i)) u;

    -- The key space decides which keys are new: the first occurrence of
    -- each, in the intents' order.
    WITH ins AS (
        INSERT INTO {{.schema}}.keys AS k (key, payload_hash)
        SELECT f.k, f.h
          FROM (SELECT DISTINCT ON (u.k) u.k, u.h, u.i
                  FROM unnest(v_keys, v_hashes) WITH ORDINALITY AS u(k, h, i)
                 ORDER BY u.k, u.i) f
         ORDER BY f.i
        ON CONFLICT (key) DO NOTHING
        RETURNING k.key
    )
    SELECT coalesce(array_agg(ins.key), '{}') INTO v_new FROM ins;

    IF cardinality(v_new) > 0 THEN
        WITH ins AS (
            INSERT INTO {{.schema}}.outbox AS o
                (key, agent_run_id, step_id, tool_name, business_scope, kind, payload, payload_hash,
                 status, cancel_cause, last_error, traceparent)
            SELECT f.k, f.a, f.s, f.t, f.b, 'forward', f.p, f.h,
                   CASE WHEN r.agent_run_id IS NOT NULL THEN 'cancelled' ELSE 'pending' END,
                   CASE WHEN r.agent_run_id IS NOT NULL THEN 'run_aborted' END,
                   CASE WHEN r.agent_run_id IS NOT NULL THEN 'run aborted before this intent was enqueued' END,
                   nullif(f.tp, '')
              FROM (SELECT DISTINCT ON (u.k) u.*
                      FROM unnest(v_keys, v_hashes, agent_run_ids, step_ids, tool_names, business_scopes, payloads,
                                  coalesce(traceparents, array_fill(NULL::text, ARRAY[n])))
                           WITH ORDINALITY AS u(k, h, a, s, t, b, p, tp, i)
                     WHERE u.k = ANY(v_new)
                     ORDER BY u.k, u.i) f
              LEFT JOIN {{.schema}}.runs r ON r.agent_run_id = f.a
             ORDER BY f.i
            ON CONFLICT ON CONSTRAINT outbox_key_unique DO NOTHING
            RETURNING o.key
        )
        SELECT coalesce(array_agg(ins.key), '{}') INTO v_made FROM ins;
    ELSE
        v_made := '{}';
    END IF;

    IF cardinality(v_made) < n THEN
        -- Some intents repeat a tuple (of this batch, or enqueued before):
        -- the first one whose payload differs from the tuple's recorded
        -- payload is refused, as single enqueues in order would refuse it,
        -- after counting the repeats before it. A new key whose outbox row
        -- existed already (written by hand) compares with that row.
        SELECT d.i, d.k INTO v_bad, v_key
          FROM unnest(v_keys, v_hashes, v_legacy) WITH ORDINALITY AS d(k, h, l, i)
          LEFT JOIN {{.schema}}.keys x ON x.key = d.k
          LEFT JOIN {{.schema}}.outbox o ON o.key = d.k AND d.k = ANY(v_new) AND d.k <> ALL(v_made)
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
$$;

-- 4. Every abort is remembered: the first one's actor and reason stay on
-- the run; an agent's or an operator's abort after it is counted, and an
-- agent's is recorded on the run's audit chain (an operator's records
-- itself, with its note).
CREATE OR REPLACE FUNCTION {{.schema}}.abort_run_internal(p_run text, p_reason text, p_actor text)
RETURNS integer LANGUAGE plpgsql
SECURITY DEFINER SET search_path = {{.schema}}, pg_catalog, pg_temp AS $$
DECLARE
    n integer;
    v_request integer := CASE WHEN p_actor = 'drainer' THEN 0 ELSE 1 END;
BEGIN
    INSERT INTO {{.schema}}.runs AS r (agent_run_id, abort_reason, aborted_by, abort_requests)
    VALUES (p_run, p_reason, p_actor, v_request)
    ON CONFLICT (agent_run_id) DO UPDATE SET abort_requests = r.abort_requests + v_request;
    IF p_actor LIKE 'agent:%' THEN
        PERFORM {{.schema}}.audit_append('run:' || p_run, 'agent:abort', p_reason);
    END IF;

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

-- 5 and 6. prune_rows moves up to p_limit rows of one terminal status, last
-- changed before p_before, to the tombstones (their keys stay in the key
-- space, marked pruned). Rows of a run whose saga is still open stay, and so
-- does a succeeded forward row of a tool in p_comp_tools (a tool whose route
-- names a compensation) until its run's saga has settled or
-- p_windows_ms[i] (the route's compensation_window) has passed since it
-- succeeded: its run can still be aborted and need it undone. Pruning a
-- run's rows stamps the run's rows_pruned_at, so its abort outlives their
-- tombstones.
CREATE FUNCTION {{.schema}}.prune_rows(p_status text, p_before timestamptz, p_limit integer,
                                       p_comp_tools text[], p_windows_ms bigint[])
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    n integer;
BEGIN
    IF p_status NOT IN ('succeeded', 'failed', 'compensated', 'cancelled') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('drainer.prune_rows: %s rows are never pruned automatically', p_status);
    END IF;
    WITH victims AS (
        SELECT o.seq FROM {{.schema}}.outbox o
          LEFT JOIN {{.schema}}.runs r ON r.agent_run_id = o.agent_run_id
          LEFT JOIN unnest(p_comp_tools, p_windows_ms) AS w(tool, ms)
                 ON p_status = 'succeeded' AND o.kind = 'forward' AND w.tool = o.tool_name
         WHERE o.status = p_status AND o.updated_at < p_before
           AND (r.agent_run_id IS NULL OR r.saga_state = 'done')
           AND (w.tool IS NULL OR r.saga_state = 'done'
                OR o.updated_at < now() - w.ms * interval '1 millisecond')
         ORDER BY o.updated_at
         LIMIT p_limit
         FOR UPDATE OF o SKIP LOCKED
    ), moved AS (
        DELETE FROM {{.schema}}.outbox o USING victims v
         WHERE o.seq = v.seq AND o.status = p_status
        RETURNING o.key, o.payload_hash, o.status, o.agent_run_id
    ), stamped AS (
        UPDATE {{.schema}}.runs r SET rows_pruned_at = now()
         WHERE r.agent_run_id IN (SELECT m.agent_run_id FROM moved m)
    )
    INSERT INTO {{.schema}}.keys AS k (key, payload_hash, final_status, pruned_at)
    SELECT m.key, m.payload_hash, m.status, now() FROM moved m
    ON CONFLICT (key) DO UPDATE SET final_status = excluded.final_status, pruned_at = excluded.pruned_at;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- The form daemons of release 14 call: no compensable tools known.
CREATE OR REPLACE FUNCTION {{.schema}}.prune_rows(p_status text, p_before timestamptz, p_limit integer)
RETURNS integer LANGUAGE sql AS $$
    SELECT {{.schema}}.prune_rows(p_status, p_before, p_limit, '{}'::text[], '{}'::bigint[])
$$;

-- 7. advance_saga: a parked forward row holds the saga; compensation rows
-- join the key space like every other row.
CREATE OR REPLACE FUNCTION {{.schema}}.advance_saga(p_run text, p_tools text[], p_comp_tools text[])
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_state    text;
    v_note     text;
    v_parked   text;
    f          record;
    v_comp     text;
    v_key      text;
    v_existing record;
    v_payload  jsonb;
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
        -- So do parked ones: their effect may exist too, and compensating
        -- around them would undo the run out of order. A human's resolve
        -- (succeeded or failed) lets the saga go on.
        SELECT o.key INTO v_parked FROM {{.schema}}.outbox o
         WHERE o.agent_run_id = p_run AND o.kind = 'forward' AND o.status = 'outcome_unknown'
         ORDER BY o.seq LIMIT 1;
        IF FOUND THEN
            v_note := format('waiting for parked step %s (outcome_unknown): resolve it with drainer resolve before the saga compensates', v_parked);
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
                v_note := format('compensation %s of row %s collides with the compensation of row %s (same step, scope and compensation tool)',
                                 v_key, f.key, v_existing.forward_key);
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
        INSERT INTO {{.schema}}.keys (key, payload_hash)
        VALUES (v_key, {{.schema}}.payload_hash(v_payload))
        ON CONFLICT (key) DO NOTHING;
        INSERT INTO {{.schema}}.outbox
            (key, agent_run_id, step_id, tool_name, business_scope, kind, payload, payload_hash, forward_key)
        VALUES (v_key, p_run, f.step_id, v_comp, f.business_scope, 'compensation', v_payload,
                {{.schema}}.payload_hash(v_payload), f.key)
        ON CONFLICT ON CONSTRAINT outbox_key_unique DO NOTHING;
        v_state := 'compensating';
        EXIT;
    END LOOP;

    UPDATE {{.schema}}.runs r
       SET saga_state = v_state, saga_updated_at = now(), saga_note = v_note
     WHERE r.agent_run_id = p_run
       AND (r.saga_state IS DISTINCT FROM v_state OR r.saga_note IS DISTINCT FROM v_note);
    RETURN v_state;
END
$$;
