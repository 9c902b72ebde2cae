-- open_transactions names the transactions running now in this database,
-- other than the caller's (their virtual transaction ids, from pg_locks,
-- and each one's database from pg_stat_activity, both of which every role
-- may read). A rotation records them once a partition's content is final
-- (rotate_queue, rotate_audit) and truncates it only when none of them is
-- running any more (any_running): one of them may hold a snapshot that
-- still sees what the truncation would take away. A transaction in another
-- database cannot read this one's tables, so it is not waited for (as
-- vacuum does not wait for it): a transaction held open for hours in
-- another database of the same server would otherwise stall every
-- truncation here for as long.
CREATE OR REPLACE FUNCTION {{.schema}}.open_transactions()
 RETURNS text[]
 LANGUAGE sql
 STABLE
AS $function$
    SELECT coalesce(array_agg(l.virtualxid::text), '{}')
      FROM pg_catalog.pg_locks l
      JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
     WHERE l.locktype = 'virtualxid' AND l.granted AND l.pid IS DISTINCT FROM pg_catalog.pg_backend_pid()
       AND a.datname = pg_catalog.current_database()
$function$;
