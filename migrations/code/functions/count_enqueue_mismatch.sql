-- count_enqueue_mismatch counts an enqueue refused with 23505 (same tuple,
-- different payload); like count_enqueue_duplicate it runs with its owner's
-- rights, and a sequence counts even when the caller rolls back.
CREATE OR REPLACE FUNCTION {{.schema}}.count_enqueue_mismatch()
 RETURNS void
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog'
AS $function$
    SELECT nextval('{{.schema}}.enqueue_mismatches')
$function$;
