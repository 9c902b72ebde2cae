-- prune_audit deletes up to p_limit audit entries older than p_before,
-- oldest first, recording for each chain the hash of its last pruned entry.
CREATE OR REPLACE FUNCTION {{.schema}}.prune_audit(p_before timestamp with time zone, p_limit integer)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    n integer;
BEGIN
    WITH doomed AS (
        SELECT a.id FROM {{.schema}}.audit a
         WHERE a.at < p_before
         ORDER BY a.id
         LIMIT p_limit
         FOR UPDATE SKIP LOCKED
    ), deleted AS (
        DELETE FROM {{.schema}}.audit a USING doomed d WHERE a.id = d.id
        RETURNING a.key, a.id, a.hash
    ), last AS (
        SELECT DISTINCT ON (key) key, hash FROM deleted ORDER BY key, id DESC
    )
    INSERT INTO {{.schema}}.audit_anchors (key, hash)
    SELECT key, hash FROM last
    ON CONFLICT (key) DO UPDATE SET hash = excluded.hash, pruned_at = now();
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$function$;
