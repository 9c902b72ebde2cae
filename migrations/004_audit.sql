-- Tamper-evident audit trail. Every status change of an outbox row (and every
-- operator action) appends an entry, in the same transaction as the change,
-- to a per-key hash chain: hash = sha256(prev_hash || entry bytes). Editing,
-- deleting or inserting an entry breaks the chain; `drainer audit verify`
-- (audit_verify) finds the first broken link. No payload or error text is
-- stored in clear: last_error is kept as its SHA-256.

CREATE TABLE {{.schema}}.audit (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key             text        NOT NULL,
    at              timestamptz NOT NULL,
    event           text        NOT NULL,
    from_status     text,
    to_status       text,
    attempts        integer,
    response_status integer,
    actor           text        NOT NULL,
    reason          text,
    detail_sha256   bytea,
    prev_hash       bytea,
    hash            bytea       NOT NULL
);
CREATE INDEX audit_key_idx ON {{.schema}}.audit (key, id);

-- When retention prunes the older entries of a chain, the hash of the last
-- pruned entry is kept here, so the remaining chain still verifies.
CREATE TABLE {{.schema}}.audit_anchors (
    key       text PRIMARY KEY,
    hash      bytea NOT NULL,
    pruned_at timestamptz NOT NULL DEFAULT now()
);


-- audit_hash is the chain function, shared by writers and the verifier.
CREATE FUNCTION {{.schema}}.audit_hash(prev bytea, key text, at timestamptz, event text, from_status text,
                                      to_status text, attempts integer, response_status integer,
                                      actor text, reason text, detail bytea)
RETURNS bytea LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT sha256(coalesce($1, ''::bytea) || convert_to(concat_ws(E'\x1f',
        $2, (extract(epoch FROM $3) * 1000000)::bigint::text, $4, coalesce($5, ''), coalesce($6, ''),
        coalesce($7::text, ''), coalesce($8::text, ''), $9, coalesce($10, ''),
        coalesce(encode($11, 'hex'), '')), 'UTF8'))
$$;

-- audit_head is the hash a key's next entry links to: its latest entry, or
-- the anchor left when retention pruned the chain's older entries.
CREATE FUNCTION {{.schema}}.audit_head(p_key text)
RETURNS bytea LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT a.hash FROM {{.schema}}.audit a WHERE a.key = p_key ORDER BY a.id DESC LIMIT 1),
                    (SELECT x.hash FROM {{.schema}}.audit_anchors x WHERE x.key = p_key))
$$;

-- audit_actor and audit_reason come from transaction-local settings that
-- operator commands set (drainer.actor, drainer.reason, drainer.action);
-- the daemon's own changes (its connections are application_name=drainer)
-- are by "drainer", anything else by "db:<role>" (an agent's enqueue, say).
CREATE FUNCTION {{.schema}}.audit_actor() RETURNS text LANGUAGE sql STABLE AS $$
    SELECT coalesce(nullif(current_setting('drainer.actor', true), ''),
                    CASE WHEN current_setting('application_name', true) = 'drainer' THEN 'drainer'
                         ELSE 'db:' || current_user END)
$$;

-- audit_event names a status change.
CREATE FUNCTION {{.schema}}.audit_event(from_status text, to_status text)
RETURNS text LANGUAGE sql STABLE AS $$
    SELECT coalesce(nullif(current_setting('drainer.action', true), ''),
        CASE
            WHEN from_status IS NULL THEN 'enqueued'
            WHEN to_status = 'in_flight' THEN 'claimed'
            WHEN from_status = 'in_flight' AND to_status = 'pending' THEN 'rescheduled'
            ELSE to_status
        END)
$$;

-- audit_rows appends one entry per changed row of a statement. Entries of a
-- key are serialised by the row lock the change holds, and each statement
-- here sees the entries committed before it (READ COMMITTED), so a chain
-- never forks.
CREATE FUNCTION {{.schema}}.audit_rows()
RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_actor  text := {{.schema}}.audit_actor();
    v_reason text := nullif(current_setting('drainer.reason', true), '');
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO {{.schema}}.audit (key, at, event, from_status, to_status, attempts, response_status,
                                       actor, reason, detail_sha256, prev_hash, hash)
        SELECT n.key, t.at, e.event, NULL, n.status, n.attempts, n.response_status, v_actor, v_reason,
               d.detail, p.hash,
               {{.schema}}.audit_hash(p.hash, n.key, t.at, e.event, NULL, n.status, n.attempts,
                                      n.response_status, v_actor, v_reason, d.detail)
          FROM new_rows n
         CROSS JOIN LATERAL (SELECT clock_timestamp() AS at) t
         CROSS JOIN LATERAL (SELECT {{.schema}}.audit_event(NULL, n.status) AS event) e
         CROSS JOIN LATERAL (SELECT n.payload_hash AS detail) d
          LEFT JOIN LATERAL (SELECT {{.schema}}.audit_head(n.key) AS hash) p ON true
         ORDER BY n.seq;
    ELSE
        INSERT INTO {{.schema}}.audit (key, at, event, from_status, to_status, attempts, response_status,
                                       actor, reason, detail_sha256, prev_hash, hash)
        SELECT n.key, t.at, e.event, o.status, n.status, n.attempts, n.response_status, v_actor, v_reason,
               d.detail, p.hash,
               {{.schema}}.audit_hash(p.hash, n.key, t.at, e.event, o.status, n.status, n.attempts,
                                      n.response_status, v_actor, v_reason, d.detail)
          FROM new_rows n
          JOIN old_rows o ON o.seq = n.seq
         CROSS JOIN LATERAL (SELECT clock_timestamp() AS at) t
         CROSS JOIN LATERAL (SELECT {{.schema}}.audit_event(o.status, n.status) AS event) e
         CROSS JOIN LATERAL (SELECT CASE WHEN n.last_error IS DISTINCT FROM o.last_error AND n.last_error IS NOT NULL
                                         THEN sha256(convert_to(n.last_error, 'UTF8')) END AS detail) d
          LEFT JOIN LATERAL (SELECT {{.schema}}.audit_head(n.key) AS hash) p ON true
         WHERE o.status IS DISTINCT FROM n.status OR o.attempts IS DISTINCT FROM n.attempts
         ORDER BY n.seq;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER outbox_audit_insert
    AFTER INSERT ON {{.schema}}.outbox
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {{.schema}}.audit_rows();

CREATE TRIGGER outbox_audit_update
    AFTER UPDATE ON {{.schema}}.outbox
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {{.schema}}.audit_rows();

-- audit_append records an action that changes no row's status (a pause, an
-- abort, a note) on the chain of key (e.g. 'route:charge_card', 'run:r1').
-- Callers serialise per key themselves (operator commands take an advisory
-- lock on the key).
CREATE FUNCTION {{.schema}}.audit_append(p_key text, p_event text, p_reason text)
RETURNS bytea LANGUAGE plpgsql AS $$
DECLARE
    v_prev  bytea;
    v_at    timestamptz := clock_timestamp();
    v_actor text := {{.schema}}.audit_actor();
    v_hash  bytea;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('drainer.audit.' || p_key, 0));
    v_prev := {{.schema}}.audit_head(p_key);
    v_hash := {{.schema}}.audit_hash(v_prev, p_key, v_at, p_event, NULL, NULL, NULL, NULL, v_actor, p_reason, NULL);
    INSERT INTO {{.schema}}.audit (key, at, event, actor, reason, prev_hash, hash)
    VALUES (p_key, v_at, p_event, v_actor, p_reason, v_prev, v_hash);
    RETURN v_hash;
END
$$;

-- audit_verify checks every chain and returns its broken links, first first:
-- an entry whose prev_hash is not the hash of the entry before it (an entry
-- was deleted or inserted), or whose hash does not match its content (it was
-- edited). After pruning, a chain's first remaining entry links to the
-- anchor kept in audit_anchors.
CREATE FUNCTION {{.schema}}.audit_verify(p_limit integer DEFAULT 100)
RETURNS TABLE (id bigint, key text, problem text)
LANGUAGE sql STABLE AS $$
    WITH chain AS (
        SELECT a.*, coalesce(lag(a.hash) OVER (PARTITION BY a.key ORDER BY a.id),
                             (SELECT x.hash FROM {{.schema}}.audit_anchors x WHERE x.key = a.key)) AS expected_prev
          FROM {{.schema}}.audit a
    )
    SELECT c.id, c.key,
           CASE WHEN c.hash IS DISTINCT FROM {{.schema}}.audit_hash(c.prev_hash, c.key, c.at, c.event, c.from_status,
                      c.to_status, c.attempts, c.response_status, c.actor, c.reason, c.detail_sha256)
                THEN 'entry content does not match its hash (edited)'
                ELSE 'prev_hash does not match the previous entry of this key (an entry was removed or inserted)'
           END
      FROM chain c
     WHERE c.hash IS DISTINCT FROM {{.schema}}.audit_hash(c.prev_hash, c.key, c.at, c.event, c.from_status,
                 c.to_status, c.attempts, c.response_status, c.actor, c.reason, c.detail_sha256)
        OR c.prev_hash IS DISTINCT FROM c.expected_prev
     ORDER BY c.id
     LIMIT p_limit
$$;
