-- audit_change records a change of a queue row's status or attempts made
-- by a statement that did not record it itself: an operator's command, a
-- reclaim, a hand-back, a write through drainer.outbox, or another role
-- editing the table. The engine's completion (store.Complete) appends its
-- entries in its own statement and moves audit_head itself, so the
-- trigger's condition (triggers/queue_audit_update.sql) is false for it and
-- this function never runs on the drain's path. The entry is appended
-- under the row's lock, after the row's head (or, where the row carries
-- none yet, the key's last entry), and the row's head moves to it.
--
-- An entry records what happened, never an earlier answer: its
-- response_status is the provider's status only when it records the answer
-- to a request actually sent (drainer.answer = 'on'); the daemon's note
-- (drainer.note) is the reason of an entry that ends a claim when no
-- operator reason (drainer.reason) is set.
CREATE OR REPLACE FUNCTION {{.schema}}.audit_change()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO '{{.schema}}', 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_key    text;
    v_at     timestamptz := clock_timestamp();
    v_actor  text := {{.schema}}.audit_actor();
    v_reason text := nullif(current_setting('drainer.reason', true), '');
    v_event  text := {{.schema}}.audit_event(OLD.status, NEW.status);
    v_resp   integer;
    v_detail bytea;
    v_prev   bytea;
BEGIN
    SELECT i.key INTO v_key FROM {{.schema}}.intents i WHERE i.seq = NEW.seq;
    IF coalesce(current_setting('drainer.answer', true) = 'on', false) AND OLD.status = 'in_flight' THEN
        v_resp := NEW.response_status;
    END IF;
    IF v_reason IS NULL AND OLD.status = 'in_flight' THEN
        v_reason := nullif(current_setting('drainer.note', true), '');
    END IF;
    IF NEW.last_error IS DISTINCT FROM OLD.last_error AND NEW.last_error IS NOT NULL THEN
        v_detail := sha256(convert_to(NEW.last_error, 'UTF8'));
    END IF;
    v_prev := coalesce(OLD.audit_head, {{.schema}}.audit_head(v_key));
    NEW.audit_head := {{.schema}}.audit_hash(v_prev, v_key, v_at, v_event, OLD.status, NEW.status, NEW.attempts,
                                            v_resp, v_actor, v_reason, v_detail);
    INSERT INTO {{.schema}}.audit (key, at, event, from_status, to_status, attempts, response_status,
                                   actor, reason, detail_sha256, prev_hash, hash)
    VALUES (v_key, v_at, v_event, OLD.status, NEW.status, NEW.attempts, v_resp,
            v_actor, v_reason, v_detail, v_prev, NEW.audit_head);
    RETURN NEW;
END
$function$;
