-- audit_rows appends one entry per row to the row's hash chain for every
-- insert, and for every update that changes a row's status or attempts, in
-- the statement that made the change (statement triggers with transition
-- tables). A claim (pending -> in_flight) writes none: the entry that ends
-- the attempt records it. The chain's head is looked up inline; JIT is off
-- (a transition table has no statistics, and compiling cost more than the
-- statement).
CREATE OR REPLACE FUNCTION {{.schema}}.audit_rows()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO '{{.schema}}', 'pg_catalog', 'pg_temp'
 SET jit TO 'off'
AS $function$
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
$function$;
