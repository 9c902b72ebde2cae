-- One audit entry per attempt instead of two, and no planning per entry.
--
-- A claim (pending -> in_flight) no longer writes an entry of its own. The
-- claim counts the attempt on the row (attempts + 1), and the entry that
-- ends the attempt records it: the completion (in_flight -> succeeded,
-- pending for a retry, failed, ...) or, when the replica died, the reclaim
-- of the expired lease (in_flight -> pending). An attempt is therefore never
-- missing from a key's chain; what is left out is the moment of the claim,
-- which `drainer inspect` shows from the row while it is in flight. The
-- claim was half of the drain's audit writes.
--
-- The chain's head is looked up inline (a lateral join the planner plans
-- with the statement) instead of through audit_head, a SQL function with
-- sub-selects that is never inlined and so was planned again for every
-- entry; audit_hash becomes STABLE, which is what its body is (concat_ws,
-- convert_to), so the planner inlines it too. Entries and hashes are
-- byte-for-byte what they were: chains written before and after this
-- migration verify as one. JIT is off for the trigger: its statement's cost
-- estimate (a transition table has no statistics) crosses jit_above_cost,
-- and compiling took 25-55 ms per statement, more than the statement.

ALTER FUNCTION {{.schema}}.audit_hash(bytea, text, timestamptz, text, text, text, integer, integer, text, text, bytea)
    STABLE;

CREATE OR REPLACE FUNCTION {{.schema}}.audit_rows()
RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path = {{.schema}}, pg_catalog, pg_temp SET jit = off AS $$
DECLARE
    v_actor  text := {{.schema}}.audit_actor();
    v_reason text := nullif(current_setting('drainer.reason', true), '');
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO {{.schema}}.audit (key, at, event, from_status, to_status, attempts, response_status,
                                       actor, reason, detail_sha256, prev_hash, hash)
        SELECT n.key, t.at, e.event, NULL, n.status, n.attempts, n.response_status, v_actor, v_reason,
               n.payload_hash, p.hash,
               {{.schema}}.audit_hash(p.hash, n.key, t.at, e.event, NULL, n.status, n.attempts,
                                      n.response_status, v_actor, v_reason, n.payload_hash)
          FROM new_rows n
         CROSS JOIN LATERAL (SELECT clock_timestamp() AS at) t
         CROSS JOIN LATERAL (SELECT {{.schema}}.audit_event(NULL, n.status) AS event) e
         CROSS JOIN LATERAL (SELECT coalesce(
                (SELECT a.hash FROM {{.schema}}.audit a WHERE a.key = n.key ORDER BY a.id DESC LIMIT 1),
                (SELECT x.hash FROM {{.schema}}.audit_anchors x WHERE x.key = n.key)) AS hash) p
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
         CROSS JOIN LATERAL (SELECT coalesce(
                (SELECT a.hash FROM {{.schema}}.audit a WHERE a.key = n.key ORDER BY a.id DESC LIMIT 1),
                (SELECT x.hash FROM {{.schema}}.audit_anchors x WHERE x.key = n.key)) AS hash) p
         WHERE (o.status IS DISTINCT FROM n.status OR o.attempts IS DISTINCT FROM n.attempts)
           -- the claim: its attempt is recorded by the entry that ends it
           AND NOT (o.status = 'pending' AND n.status = 'in_flight')
         ORDER BY n.seq;
    END IF;
    RETURN NULL;
END
$$;

-- In-flight rows move to an index of their own. The reclaim looks for
-- expired leases in it by expiry: the entries of rows that left in_flight
-- since the last vacuum all expire in the future (a lease outlives its
-- attempt), so the scan stops before them. Through outbox_status_idx it
-- visited every one of them in the heap: hundreds of milliseconds per
-- reclaim during a fast drain. outbox_status_idx keeps the other statuses
-- (operator listings, retention, counts), so a claim still adds one entry
-- to one of the two, as before.
CREATE INDEX outbox_lease_idx ON {{.schema}}.outbox (lease_expires_at) WHERE status = 'in_flight';
DROP INDEX {{.schema}}.outbox_status_idx;
CREATE INDEX outbox_status_idx ON {{.schema}}.outbox (status, updated_at) WHERE status <> 'in_flight';
