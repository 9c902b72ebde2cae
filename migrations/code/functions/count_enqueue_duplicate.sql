-- The counting functions run with their owner's rights (the role that ran
-- `drainer migrate`), so an agent's role needs no privilege on the
-- sequences to enqueue.
CREATE OR REPLACE FUNCTION {{.schema}}.count_enqueue_duplicate()
 RETURNS void
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog'
AS $function$
    SELECT nextval('{{.schema}}.enqueue_duplicates')
$function$;
