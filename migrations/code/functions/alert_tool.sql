-- alert_tool is the tool_name of the alert row queued for each
-- compensation_failed row (outbox.AlertTool in the daemon; a test checks
-- they agree). Alert rows never abort a run.
CREATE OR REPLACE FUNCTION {{.schema}}.alert_tool()
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT 'drainer.compensation_failed'::text
$function$;
