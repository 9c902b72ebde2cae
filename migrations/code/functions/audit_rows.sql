-- audit_rows appends the first entry of a row's hash chain for an insert
-- into queue that did not append it itself, before the row is written,
-- and sets the row's audit_head to it (the trigger queue_audit_insert
-- runs it only for a row inserted without a head). The enqueue functions
-- append their rows' first entries themselves; saga compensation rows,
-- alert rows, writes through drainer.outbox and other roles' inserts come
-- here. The chain's head is looked up (a key enqueued again after its rows
-- were pruned continues its chain).
CREATE OR REPLACE FUNCTION {{.schema}}.audit_rows()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO '{{.schema}}', 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_key    text;
    v_hash   bytea;
    v_at     timestamptz := clock_timestamp();
    v_actor  text := {{.schema}}.audit_actor();
    v_reason text := nullif(current_setting('drainer.reason', true), '');
    v_event  text := {{.schema}}.audit_event(NULL, NEW.status);
    v_prev   bytea;
BEGIN
    SELECT i.key, i.payload_hash INTO v_key, v_hash FROM {{.schema}}.intents i WHERE i.seq = NEW.seq;
    v_prev := {{.schema}}.audit_head(v_key);
    NEW.audit_head := {{.schema}}.audit_hash(v_prev, v_key, v_at, v_event, NULL, NEW.status, NEW.attempts,
                                            NEW.response_status, v_actor, v_reason, v_hash);
    INSERT INTO {{.schema}}.audit (key, at, event, from_status, to_status, attempts, response_status,
                                   actor, reason, detail_sha256, prev_hash, hash)
    VALUES (v_key, v_at, v_event, NULL, NEW.status, NEW.attempts, NEW.response_status,
            v_actor, v_reason, v_hash, v_prev, NEW.audit_head);
    RETURN NEW;
END
$function$;
