-- saga_lock_key is the advisory lock of one run's saga: advance_saga tries
-- it, and the operator commands that change a run (requeue's revival,
-- resolve) take it, so a saga step and an operator never interleave.
CREATE OR REPLACE FUNCTION {{.schema}}.saga_lock_key(p_run text)
 RETURNS bigint
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
AS $function$
    SELECT hashtextextended('drainer.saga.' || p_run, 0)
$function$;
