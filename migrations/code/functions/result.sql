-- result lets an agent read an outcome without knowing the table.
CREATE OR REPLACE FUNCTION {{.schema}}.result(key text)
 RETURNS TABLE(status text, response jsonb, last_error text)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO '{{.schema}}', 'pg_catalog', 'pg_temp'
AS $function$
    SELECT o.status, o.response, o.last_error FROM {{.schema}}.outbox o WHERE o.key = $1
    UNION ALL
    SELECT t.final_status, NULL::jsonb, NULL::text FROM {{.schema}}.tombstones t
     WHERE t.key = $1 AND NOT EXISTS (SELECT 1 FROM {{.schema}}.outbox o WHERE o.key = $1)
$function$;
