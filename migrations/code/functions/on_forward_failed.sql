-- A forward row that ends failed aborts its run, in the same transaction as
-- the status change, so the saga is never lost nor started twice.
CREATE OR REPLACE FUNCTION {{.schema}}.on_forward_failed()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO '{{.schema}}', 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    PERFORM {{.schema}}.abort_run_internal(NEW.agent_run_id,
        format('step %s (%s) failed', NEW.step_id, NEW.tool_name), 'drainer');
    RETURN NULL;
END
$function$;
