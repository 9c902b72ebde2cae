-- any_running says whether one of the transactions open_transactions named
-- is still running.
CREATE OR REPLACE FUNCTION {{.schema}}.any_running(p_vxids text[])
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
    SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
                    WHERE l.locktype = 'virtualxid' AND l.granted AND l.virtualxid::text = ANY (p_vxids))
$function$;
