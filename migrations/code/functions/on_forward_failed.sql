-- A forward row that ends failed aborts its run, in the same transaction as
-- the status change, so the saga is never lost nor started twice.
CREATE OR REPLACE FUNCTION {{.schema}}.on_forward_failed()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO '{{.schema}}', 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_run  text;
    v_step text;
BEGIN
    SELECT i.agent_run_id, i.step_id INTO v_run, v_step FROM {{.schema}}.intents i WHERE i.seq = NEW.seq;
    PERFORM {{.schema}}.abort_run_internal(v_run, format('step %s (%s) failed', v_step, NEW.tool_name), 'drainer');
    RETURN NULL;
END
$function$;
