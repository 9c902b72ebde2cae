-- sweep_sagas advances up to p_limit active sagas whose run id sorts after
-- p_after (a cursor: every active saga gets its turn, however many there
-- are), each in a subtransaction of its own: a saga whose step fails is
-- noted on its run and skipped, the others keep their progress. It returns
-- each run looked at with its new state ('error: …' for a failed step).
CREATE OR REPLACE FUNCTION {{.schema}}.sweep_sagas(p_after text, p_limit integer, p_tools text[], p_comp_tools text[])
 RETURNS TABLE(agent_run_id text, state text)
 LANGUAGE plpgsql
AS $function$
DECLARE
    r       record;
    v_state text;
BEGIN
    FOR r IN SELECT x.agent_run_id AS id FROM {{.schema}}.runs x
              WHERE x.saga_state IN ('waiting', 'compensating') AND x.agent_run_id > coalesce(p_after, '')
              ORDER BY x.agent_run_id
              LIMIT p_limit
    LOOP
        BEGIN
            v_state := {{.schema}}.advance_saga(r.id, p_tools, p_comp_tools);
        EXCEPTION WHEN OTHERS THEN
            v_state := 'error: ' || SQLERRM;
            UPDATE {{.schema}}.runs x SET saga_note = 'saga step failed: ' || SQLERRM
             WHERE x.agent_run_id = r.id;
        END;
        agent_run_id := r.id;
        state := v_state;
        RETURN NEXT;
    END LOOP;
END
$function$;
