-- audit_verify checks every chain and returns its broken links, first first:
-- an entry whose prev_hash is not the hash of the entry before it (an entry
-- was deleted or inserted), or whose hash does not match its content (it was
-- edited). After pruning, a chain's first remaining entry links to the
-- anchor kept in audit_anchors.
CREATE OR REPLACE FUNCTION {{.schema}}.audit_verify(p_limit integer DEFAULT 100)
 RETURNS TABLE(id bigint, key text, problem text)
 LANGUAGE sql
 STABLE
AS $function$
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
$function$;
