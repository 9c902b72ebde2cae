-- audit_rows appends the first entry of each row's hash chain for every
-- insert into queue, in the statement that made it (a statement trigger
-- with a transition table; the row's key and payload hash are its
-- intent's, which never change). Later changes are recorded by the
-- statement that makes them or by audit_change. The chain's head is
-- looked up inline (a key enqueued again after its rows were pruned
-- continues its chain); JIT is off (a transition table has no statistics,
-- and compiling cost more than the statement).
CREATE OR REPLACE FUNCTION {{.schema}}.audit_rows()
RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path = {{.schema}}, pg_catalog, pg_temp SET jit = off AS $$
DECLARE
    v_actor  text := {{.schema}}.audit_actor();
    v_reason text := nullif(current_setting('drainer.reason', true), '');
BEGIN
    INSERT INTO {{.schema}}.audit (key, at, event, from_status, to_status, attempts, response_status,
                                   actor, reason, detail_sha256, prev_hash, hash)
    SELECT i.key, t.at, e.event, NULL, n.status, n.attempts, n.response_status, v_actor, v_reason,
           i.payload_hash, p.hash,
           {{.schema}}.audit_hash(p.hash, i.key, t.at, e.event, NULL, n.status, n.attempts,
                                  n.response_status, v_actor, v_reason, i.payload_hash)
      FROM new_rows n
      JOIN {{.schema}}.intents i ON i.seq = n.seq
     CROSS JOIN LATERAL (SELECT clock_timestamp() AS at) t
     CROSS JOIN LATERAL (SELECT {{.schema}}.audit_event(NULL, n.status) AS event) e
     CROSS JOIN LATERAL (SELECT coalesce(
            (SELECT a.hash FROM {{.schema}}.audit a WHERE a.key = i.key ORDER BY a.id DESC LIMIT 1),
            (SELECT x.hash FROM {{.schema}}.audit_anchors x WHERE x.key = i.key)) AS hash) p
     ORDER BY n.seq;
    RETURN NULL;
END
$$;
