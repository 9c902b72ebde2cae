-- audit_append records an action that changes no row's status (a pause, an
-- abort, a note) on the chain of key (e.g. 'route:charge_card', 'run:r1').
-- Entries on one key are serialised by an advisory lock on the key; on a
-- row's key (an operator's requeue that changes nothing else), by the
-- row's lock too, and the row's audit_head moves to the entry.
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
    v_seq   bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('drainer.audit.' || p_key, 0));
    -- A row's key: the entry goes after the head the row carries, under
    -- the row's lock, and becomes its head (as every entry of a row does).
    SELECT q.seq, q.audit_head INTO v_seq, v_prev
      FROM {{.schema}}.intents i JOIN {{.schema}}.queue q ON q.seq = i.seq
     WHERE i.key = p_key
       FOR UPDATE OF q;
    v_prev := coalesce(v_prev, {{.schema}}.audit_head(p_key));
    v_hash := {{.schema}}.audit_hash(v_prev, p_key, v_at, p_event, NULL, NULL, NULL, NULL, v_actor, p_reason, NULL);
    INSERT INTO {{.schema}}.audit (key, at, event, actor, reason, prev_hash, hash)
    VALUES (p_key, v_at, p_event, v_actor, p_reason, v_prev, v_hash);
    IF v_seq IS NOT NULL THEN
        UPDATE {{.schema}}.queue SET audit_head = v_hash WHERE seq = v_seq;
    END IF;
    RETURN v_hash;
END
$function$;
