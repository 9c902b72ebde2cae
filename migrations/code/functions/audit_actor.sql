-- The audit names the caller, not the functions' owner: an operator
-- command's drainer.actor, "drainer" for the daemon's own connections
-- (application_name=drainer), anything else "db:<role>", the role the
-- session acts as (what current_user named before the functions below
-- became SECURITY DEFINER).
CREATE OR REPLACE FUNCTION {{.schema}}.audit_actor()
 RETURNS text
 LANGUAGE sql
 STABLE
AS $function$
    SELECT coalesce(nullif(current_setting('drainer.actor', true), ''),
                    CASE WHEN current_setting('application_name', true) = 'drainer' THEN 'drainer'
                         ELSE 'db:' || {{.schema}}.session_role() END)
$function$;
