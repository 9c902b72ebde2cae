-- open_transactions names the transactions running now, other than the
-- caller's (their virtual transaction ids, from pg_locks, which every role
-- may read). A rotation records them once a partition's content is final
-- (rotate_queue, rotate_audit) and truncates it only when none of them is
-- running any more (any_running): one of them may hold a snapshot that
-- still sees what the truncation would take away.
CREATE OR REPLACE FUNCTION {{.schema}}.open_transactions()
 RETURNS text[]
 LANGUAGE sql
 STABLE
AS $function$
    SELECT coalesce(array_agg(l.virtualxid::text), '{}') FROM pg_catalog.pg_locks l
     WHERE l.locktype = 'virtualxid' AND l.granted AND l.pid IS DISTINCT FROM pg_catalog.pg_backend_pid()
$function$;
