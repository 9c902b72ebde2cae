-- drainer schema, release 1. Rendered with {{.schema}} = the target schema.
-- Forward-only: never edit an applied migration; fix forward in a new file.

CREATE TABLE {{.schema}}.schema_meta (
    name  text PRIMARY KEY,
    value text NOT NULL
);
-- The oldest schema version a daemon must know to work on this schema. A
-- contract step (dropping something old daemons use) raises it.
INSERT INTO {{.schema}}.schema_meta (name, value) VALUES ('min_daemon_schema_version', '1');

CREATE TABLE {{.schema}}.outbox (
    seq              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key              text        NOT NULL,
    agent_run_id     text        NOT NULL,
    step_id          text        NOT NULL,
    tool_name        text        NOT NULL,
    business_scope   text        NOT NULL DEFAULT '',
    kind             text        NOT NULL DEFAULT 'forward',
    payload          jsonb       NOT NULL,
    payload_hash     bytea       NOT NULL,
    status           text        NOT NULL DEFAULT 'pending',
    attempts         integer     NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    first_attempt_at timestamptz,
    last_error       text,
    last_problem     jsonb,
    response         jsonb,
    response_status  integer,
    lease_token      uuid,
    lease_expires_at timestamptz,
    leased_by        text,
    forward_key      text,
    traceparent      text,
    note             text,
    -- Why a row was cancelled: 'run_aborted' (by its run's abort) or 'operator'.
    cancel_cause     text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outbox_key_unique UNIQUE (key),
    CONSTRAINT outbox_kind_check CHECK (kind IN ('forward', 'compensation')),
    CONSTRAINT outbox_status_check CHECK (status IN ('pending', 'in_flight', 'succeeded', 'failed',
        'outcome_unknown', 'compensated', 'compensation_failed', 'cancelled')),
    CONSTRAINT outbox_lease_check CHECK ((status = 'in_flight') = (lease_token IS NOT NULL)),
    CONSTRAINT outbox_attempts_check CHECK (attempts >= 0)
);

-- The claim scans this partial index in next_attempt_at order: it holds only
-- pending rows, so it stays small however large the table grows.
CREATE INDEX outbox_due_idx ON {{.schema}}.outbox (next_attempt_at, seq) WHERE status = 'pending';
-- Saga and run queries.
CREATE INDEX outbox_run_idx ON {{.schema}}.outbox (agent_run_id, seq);
-- Operator listing by status, retention, expired-lease reclaim (in-flight
-- rows are few). Every status change is a non-HOT update that adds an entry
-- to each index, so the outbox keeps as few indexes as it can.
CREATE INDEX outbox_status_idx ON {{.schema}}.outbox (status, updated_at);

-- Aborted runs: later enqueues into them are created cancelled.
CREATE TABLE {{.schema}}.runs (
    agent_run_id text PRIMARY KEY,
    aborted_at   timestamptz NOT NULL DEFAULT now(),
    abort_reason text NOT NULL,
    aborted_by   text NOT NULL
);

-- Keys of pruned rows, so a late re-enqueue of the same tuple is still answered
-- created = false and never dispatched twice.
CREATE TABLE {{.schema}}.tombstones (
    key          text PRIMARY KEY,
    payload_hash bytea NOT NULL,
    final_status text NOT NULL,
    pruned_at    timestamptz NOT NULL DEFAULT now()
);

-- canonical_tuple and idempotency_key reproduce idemkey.Tuple.Canonical and
-- .Key byte for byte: to_json(text) escapes exactly as RFC 8785 does.
CREATE FUNCTION {{.schema}}.canonical_tuple(agent_run_id text, step_id text, tool_name text, business_scope text)
RETURNS text LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT '{"agent_run_id":' || to_json($1)::text
        || ',"business_scope":' || to_json($4)::text
        || ',"step_id":' || to_json($2)::text
        || ',"tool_name":' || to_json($3)::text || '}'
$$;

CREATE FUNCTION {{.schema}}.idempotency_key(agent_run_id text, step_id text, tool_name text, business_scope text)
RETURNS text LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT 'idem_v1_' || left(encode(sha256(convert_to(
        {{.schema}}.canonical_tuple($1, $2, $3, $4), 'UTF8')), 'hex'), 32)
$$;

CREATE FUNCTION {{.schema}}.payload_hash(payload jsonb)
RETURNS bytea LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT sha256(convert_to($1::text, 'UTF8'))
$$;

-- check_tuple raises 22023 naming every invalid field of a tuple.
CREATE FUNCTION {{.schema}}.check_tuple(agent_run_id text, step_id text, tool_name text, business_scope text)
RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    problems text[] := '{}';
    names    text[] := ARRAY['agent_run_id', 'step_id', 'tool_name', 'business_scope'];
    vals     text[] := ARRAY[agent_run_id, step_id, tool_name, business_scope];
BEGIN
    FOR i IN 1..4 LOOP
        IF vals[i] IS NULL THEN
            problems := problems || (names[i] || ' must not be null');
        ELSIF i < 4 AND vals[i] = '' THEN
            problems := problems || (names[i] || ' must not be empty');
        ELSIF octet_length(vals[i]) > 1024 THEN
            problems := problems || format('%s is %s bytes, more than the limit of 1024', names[i], octet_length(vals[i]));
        END IF;
    END LOOP;
    IF cardinality(problems) > 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = 'drainer.enqueue: invalid intent tuple: ' || array_to_string(problems, '; ');
    END IF;
END
$$;

-- abort_run_internal marks a run aborted and cancels its never-attempted
-- forward rows. Rows already attempted finish first (their effect may exist);
-- the daemon then compensates the run's succeeded rows.
CREATE FUNCTION {{.schema}}.abort_run_internal(p_run text, p_reason text, p_actor text)
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
    RETURN n;
END
$$;

-- abort_run: the agent decided the run must be undone. Runs in the caller's
-- transaction; returns how many never-attempted rows were cancelled.
CREATE FUNCTION {{.schema}}.abort_run(agent_run_id text, reason text)
RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
    IF agent_run_id IS NULL OR agent_run_id = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'drainer.abort_run: agent_run_id must not be empty';
    END IF;
    RETURN {{.schema}}.abort_run_internal(agent_run_id, coalesce(nullif(reason, ''), 'aborted by the agent'), 'agent:' || current_user);
END
$$;

-- A forward row that ends failed aborts its run, in the same transaction as
-- the status change, so the saga is never lost nor started twice.
CREATE FUNCTION {{.schema}}.on_forward_failed()
RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM {{.schema}}.abort_run_internal(NEW.agent_run_id,
        format('step %s (%s) failed', NEW.step_id, NEW.tool_name), 'drainer');
    RETURN NULL;
END
$$;

CREATE TRIGGER outbox_forward_failed
    AFTER UPDATE OF status ON {{.schema}}.outbox
    FOR EACH ROW
    WHEN (NEW.status = 'failed' AND OLD.status IS DISTINCT FROM 'failed' AND NEW.kind = 'forward')
    EXECUTE FUNCTION {{.schema}}.on_forward_failed();

-- One notification per inserting statement; identical notifications of one
-- transaction fold into one. A notifying commit takes a server-wide lock
-- until it is on disk, so a high-rate producer may SET drainer.notify = off
-- (session or transaction): the daemon's poll (1s) then finds its rows.
CREATE FUNCTION {{.schema}}.notify_outbox()
RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('drainer.notify', true) IS DISTINCT FROM 'off' THEN
        PERFORM pg_notify('{{.schema}}.outbox', '');
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER outbox_notify
    AFTER INSERT ON {{.schema}}.outbox
    FOR EACH STATEMENT
    EXECUTE FUNCTION {{.schema}}.notify_outbox();

-- enqueue records one intent, idempotently. Same tuple and same payload: the
-- existing key, created = false (also after the row was pruned). Same tuple,
-- different payload: SQLSTATE 23505 naming the key. The payload limit is the
-- setting drainer.max_payload_bytes (default 1 MiB).
CREATE FUNCTION {{.schema}}.enqueue(agent_run_id text, step_id text, tool_name text,
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
            RAISE EXCEPTION USING ERRCODE = '23505',
                MESSAGE = format('drainer.enqueue: key %s already enqueued with a different payload', v_key);
        END IF;
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
                RAISE EXCEPTION USING ERRCODE = '23505',
                    MESSAGE = format('drainer.enqueue: key %s already enqueued with a different payload', v_key);
            END IF;
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
        RAISE EXCEPTION USING ERRCODE = '23505',
            MESSAGE = format('drainer.enqueue: key %s already enqueued with a different payload', v_key);
    END IF;
    RETURN QUERY SELECT v_key, false;
END
$$;

-- result lets an agent read an outcome without knowing the table.
CREATE FUNCTION {{.schema}}.result(key text)
RETURNS TABLE (status text, response jsonb, last_error text)
LANGUAGE sql STABLE AS $$
    SELECT o.status, o.response, o.last_error FROM {{.schema}}.outbox o WHERE o.key = $1
    UNION ALL
    SELECT t.final_status, NULL::jsonb, NULL::text FROM {{.schema}}.tombstones t
     WHERE t.key = $1 AND NOT EXISTS (SELECT 1 FROM {{.schema}}.outbox o WHERE o.key = $1)
$$;

-- The latest backlog snapshot, computed by one replica at a time and read by
-- all, so metric scrapes never query the outbox.
CREATE TABLE {{.schema}}.backlog_snapshot (
    id                           boolean PRIMARY KEY DEFAULT true CHECK (id),
    taken_at                     timestamptz NOT NULL,
    rows_by_status               jsonb NOT NULL,
    oldest_pending_age_seconds   double precision NOT NULL,
    oldest_in_flight_age_seconds double precision NOT NULL,
    cost_seconds                 double precision NOT NULL
);
