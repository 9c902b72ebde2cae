-- audit_problems checks the chains, of every key or of p_key, and returns
-- their broken links (unordered): an entry whose prev_hash is not the hash
-- of the entry before it (an entry was deleted or inserted), or whose hash
-- does not match its content (it was edited); after pruning, a chain's
-- first remaining entry links to the anchor kept in audit_anchors (or to
-- the one it replaced, while the entries it stands for are still there:
-- rotate_audit). And
-- every queue row must stand where its chain ends: its audit_head the
-- chain's last hash, its status the last entry's (so deleting a chain's
-- last entry, or a change made with the audit bypassed, is caught too).
-- audit_verify (every chain) and the console (one key) read it.
CREATE OR REPLACE FUNCTION {{.schema}}.audit_problems(p_key text)
 RETURNS TABLE(id bigint, key text, problem text)
 LANGUAGE sql
 STABLE
AS $function$
    WITH chain AS (
        SELECT a.*, CASE WHEN lag(a.id) OVER w IS NOT NULL THEN lag(a.hash) OVER w
                         -- an anchor whose entries are still here (their
                         -- generation not truncated yet): the chain
                         -- starts where the anchor it replaced stood
                         WHEN x.hash IN (SELECT o.hash FROM {{.schema}}.audit o WHERE o.key = a.key) THEN x.replaced
                         ELSE x.hash END AS expected_prev
          FROM {{.schema}}.audit a
          LEFT JOIN {{.schema}}.audit_anchors x ON x.key = a.key
         WHERE p_key IS NULL OR a.key = p_key
        WINDOW w AS (PARTITION BY a.key ORDER BY a.id)
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
    UNION ALL
    -- every row's state is its chain's last entry: a change made with the
    -- audit bypassed, or the last entry deleted, shows here (a claim writes
    -- no entry: an in_flight row's last entry is the pending it came from)
    SELECT coalesce(h.id, st.id), i.key,
           CASE WHEN q.audit_head IS NOT NULL AND q.audit_head IS DISTINCT FROM coalesce(h.hash, x.hash)
                THEN 'the row''s audit head is not its chain''s last entry (an entry was removed)'
                ELSE format('the row is %s but its chain''s last change records %s (a change was not recorded)',
                            q.status, st.to_status)
           END
      FROM {{.schema}}.queue q
      JOIN {{.schema}}.intents i ON i.seq = q.seq
      LEFT JOIN LATERAL (SELECT a.id, a.hash FROM {{.schema}}.audit a
                          WHERE a.key = i.key ORDER BY a.id DESC LIMIT 1) h ON true
      -- the last entry that records a status (an operator's note on the
      -- row, audit_append, records none)
      LEFT JOIN LATERAL (SELECT a.id, a.to_status FROM {{.schema}}.audit a
                          WHERE a.key = i.key AND a.to_status IS NOT NULL ORDER BY a.id DESC LIMIT 1) st ON true
      LEFT JOIN {{.schema}}.audit_anchors x ON x.key = i.key
     WHERE (p_key IS NULL OR i.key = p_key)
       AND ((q.audit_head IS NOT NULL AND q.audit_head IS DISTINCT FROM coalesce(h.hash, x.hash))
            OR (st.id IS NOT NULL AND q.status IS DISTINCT FROM st.to_status
                AND NOT (q.status = 'in_flight' AND st.to_status = 'pending')))
$function$;
