-- audit_append records an action that changes no row's status (a pause, an
-- abort, a note) on the chain of key (e.g. 'route:charge_card', 'run:r1').
-- Callers serialise per key themselves (operator commands take an advisory
-- lock on the key).
CREATE OR REPLACE FUNCTION {{.schema}}.audit_append(p_key text, p_event text, p_reason text)
 RETURNS bytea
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO '{{.schema}}', 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_prev  bytea;
    v_at    timestamptz := clock_timestamp();
    v_actor text := {{.schema}}.audit_actor();
    v_hash  bytea;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('drainer.audit.' || p_key, 0));
    v_prev := {{.schema}}.audit_head(p_key);
    v_hash := {{.schema}}.audit_hash(v_prev, p_key, v_at, p_event, NULL, NULL, NULL, NULL, v_actor, p_reason, NULL);
    INSERT INTO {{.schema}}.audit (key, at, event, actor, reason, prev_hash, hash)
    VALUES (p_key, v_at, p_event, v_actor, p_reason, v_prev, v_hash);
    RETURN v_hash;
END
$function$;
