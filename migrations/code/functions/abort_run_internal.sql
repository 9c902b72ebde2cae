-- abort_run_internal marks a run aborted and cancels its never-attempted
-- forward rows; rows already attempted finish first (their effect may
-- exist), then the daemon compensates the run's succeeded rows. The first
-- abort's actor and reason stay on the run; an agent's or an operator's
-- abort after it is counted (abort_requests: requeue then never revives the
-- run), and an agent's is recorded on the run's audit chain (an operator's
-- command records its own, with its note). It wakes the daemons' claim and
-- saga loops.
CREATE OR REPLACE FUNCTION {{.schema}}.abort_run_internal(p_run text, p_reason text, p_actor text)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO '{{.schema}}', 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    n integer;
    v_request integer := CASE WHEN p_actor = 'drainer' THEN 0 ELSE 1 END;
BEGIN
    INSERT INTO {{.schema}}.runs AS r (agent_run_id, abort_reason, aborted_by, abort_requests)
    VALUES (p_run, p_reason, p_actor, v_request)
    ON CONFLICT (agent_run_id) DO UPDATE SET abort_requests = r.abort_requests + v_request;
    IF p_actor LIKE 'agent:%' THEN
        PERFORM {{.schema}}.audit_append('run:' || p_run, 'agent:abort', p_reason);
    END IF;

    -- The run's rows, found through its intents first (an array, looked
    -- up once by the run's index), then each by its key: joined, the plan
    -- could walk every pending row instead, whenever the statistics were
    -- taken before the queue filled (a new generation not analyzed yet).
    UPDATE {{.schema}}.queue o
       SET status = 'cancelled',
           cancel_cause = 'run_aborted',
           last_error = 'run aborted: ' || p_reason,
           updated_at = now()
     WHERE o.seq = ANY (ARRAY(SELECT i.seq FROM {{.schema}}.intents i WHERE i.agent_run_id = p_run))
       AND o.kind = 'forward'
       AND o.status = 'pending'
       AND o.attempts = 0;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM pg_notify('{{.schema}}.outbox', '');
    PERFORM pg_notify('{{.schema}}.saga', p_run);
    RETURN n;
END
$function$;
