-- audit_rows appends one entry per row to the row's hash chain for every
-- insert into queue, and for every update of queue that changes a row's
-- status or attempts, in the statement that made the change (statement
-- triggers with transition tables; the row's key and payload hash are its
-- intent's, which never change). A claim (pending -> in_flight) writes none: the entry that ends
-- the attempt records it. The chain's head is looked up inline; JIT is off
-- (a transition table has no statistics, and compiling cost more than the
-- statement).
--
-- An entry records what happened, never an earlier answer: its
-- response_status is the provider's status only when it records the answer
-- to a request actually sent (the completion of sent requests runs with the
-- transaction-local setting drainer.answer = 'on', store.Complete; null when
-- the request got no answer); every other entry records null. Rows handed
-- back without a request (deferred, held, released) are written in
-- statements of their own with drainer.note saying why, which an entry
-- that ends a claim takes as its reason when no operator reason is set.
CREATE OR REPLACE FUNCTION {{.schema}}.audit_rows()
RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path = {{.schema}}, pg_catalog, pg_temp SET jit = off AS $$
DECLARE
    v_actor  text := {{.schema}}.audit_actor();
    v_reason text := nullif(current_setting('drainer.reason', true), '');
    v_answer boolean := coalesce(current_setting('drainer.answer', true) = 'on', false);
    v_note   text := nullif(current_setting('drainer.note', true), '');
BEGIN
    IF TG_OP = 'INSERT' THEN
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
    ELSE
        INSERT INTO {{.schema}}.audit (key, at, event, from_status, to_status, attempts, response_status,
                                       actor, reason, detail_sha256, prev_hash, hash)
        SELECT i.key, t.at, e.event, o.status, n.status, n.attempts, r.status, v_actor, r.reason,
               d.detail, p.hash,
               {{.schema}}.audit_hash(p.hash, i.key, t.at, e.event, o.status, n.status, n.attempts,
                                      r.status, v_actor, r.reason, d.detail)
          FROM new_rows n
          JOIN old_rows o ON o.seq = n.seq
          JOIN {{.schema}}.intents i ON i.seq = n.seq
         CROSS JOIN LATERAL (SELECT clock_timestamp() AS at) t
         CROSS JOIN LATERAL (SELECT {{.schema}}.audit_event(o.status, n.status) AS event) e
         -- an answer only from the completion of a request sent; the
         -- daemon's note only on the entry that ends a claim
         CROSS JOIN LATERAL (SELECT CASE WHEN v_answer AND o.status = 'in_flight' THEN n.response_status END AS status,
                                    CASE WHEN v_reason IS NULL AND o.status = 'in_flight' THEN v_note ELSE v_reason END AS reason) r
         CROSS JOIN LATERAL (SELECT CASE WHEN n.last_error IS DISTINCT FROM o.last_error AND n.last_error IS NOT NULL
                                         THEN sha256(convert_to(n.last_error, 'UTF8')) END AS detail) d
         CROSS JOIN LATERAL (SELECT coalesce(
                (SELECT a.hash FROM {{.schema}}.audit a WHERE a.key = i.key ORDER BY a.id DESC LIMIT 1),
                (SELECT x.hash FROM {{.schema}}.audit_anchors x WHERE x.key = i.key)) AS hash) p
         WHERE (o.status IS DISTINCT FROM n.status OR o.attempts IS DISTINCT FROM n.attempts)
           -- the claim: its attempt is recorded by the entry that ends it
           AND NOT (o.status = 'pending' AND n.status = 'in_flight')
         ORDER BY n.seq;
    END IF;
    RETURN NULL;
END
$$;
