-- abort_run: the agent decided the run must be undone. Runs in the caller's
-- transaction; records "agent:<role>" as the aborter and returns how many
-- never-attempted rows were cancelled (abort_run_internal).
CREATE OR REPLACE FUNCTION {{.schema}}.abort_run(agent_run_id text, reason text)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO '{{.schema}}', 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF agent_run_id IS NULL OR agent_run_id = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'drainer.abort_run: agent_run_id must not be empty';
    END IF;
    RETURN {{.schema}}.abort_run_internal(agent_run_id, coalesce(nullif(reason, ''), 'aborted by the agent'),
                                          'agent:' || {{.schema}}.session_role());
END
$function$;
