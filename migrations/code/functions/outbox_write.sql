-- outbox_write carries a write through the outbox view to the tables behind
-- it: an insert makes the intent and its queue row (defaults as the old
-- table had them), an update writes the queue row and, only when one of
-- them changed, the intent's columns, a delete removes both. The triggers
-- on queue then audit the change as for any other writer. RETURNING sees
-- what was stored (a floor the queue's trigger kept included).
--
-- A statement on the view reads its rows without locking them, so an update
-- or delete is written only while the queue row is still exactly the one
-- the statement read (compared under the row's lock): a row that another
-- transaction changed meanwhile (a claim, a completion, a reclaim) is left
-- as that transaction made it, and the statement does not count it, as a
-- table's UPDATE skips a row that no longer matches its WHERE. A blind
-- write would put back the state the statement read and undo the other
-- transaction's change.
CREATE OR REPLACE FUNCTION {{.schema}}.outbox_write()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_bytes integer; -- the payload's whole size as the intent stored it (queue.payload_bytes)
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM {{.schema}}.queue q
         WHERE q.seq = OLD.seq
           AND (q.status, q.attempts, q.next_attempt_at, q.not_before, q.first_attempt_at, q.lease_token,
                q.lease_expires_at, q.leased_by, q.reclaimed_lease, q.last_error, q.last_problem, q.response,
                q.response_status, q.note, q.cancel_cause, q.updated_at)
               IS NOT DISTINCT FROM
               (OLD.status, OLD.attempts, OLD.next_attempt_at, OLD.not_before, OLD.first_attempt_at, OLD.lease_token,
                OLD.lease_expires_at, OLD.leased_by, OLD.reclaimed_lease, OLD.last_error, OLD.last_problem, OLD.response,
                OLD.response_status, OLD.note, OLD.cancel_cause, OLD.updated_at);
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        DELETE FROM {{.schema}}.intents i WHERE i.seq = OLD.seq;
        RETURN OLD;
    END IF;
    IF TG_OP = 'INSERT' THEN
        NEW.business_scope := coalesce(NEW.business_scope, '');
        NEW.kind := coalesce(NEW.kind, 'forward');
        NEW.created_at := coalesce(NEW.created_at, now());
        IF NEW.seq IS NULL THEN
            INSERT INTO {{.schema}}.intents (key, agent_run_id, step_id, tool_name, business_scope, kind,
                                             payload, payload_hash, forward_key, traceparent, created_at)
            VALUES (NEW.key, NEW.agent_run_id, NEW.step_id, NEW.tool_name, NEW.business_scope, NEW.kind,
                    NEW.payload, NEW.payload_hash, NEW.forward_key, NEW.traceparent, NEW.created_at)
            RETURNING seq, pg_column_size(payload) INTO NEW.seq, v_bytes;
        ELSE
            INSERT INTO {{.schema}}.intents (seq, key, agent_run_id, step_id, tool_name, business_scope, kind,
                                             payload, payload_hash, forward_key, traceparent, created_at)
            OVERRIDING SYSTEM VALUE
            VALUES (NEW.seq, NEW.key, NEW.agent_run_id, NEW.step_id, NEW.tool_name, NEW.business_scope, NEW.kind,
                    NEW.payload, NEW.payload_hash, NEW.forward_key, NEW.traceparent, NEW.created_at)
            RETURNING pg_column_size(payload) INTO v_bytes;
        END IF;
        INSERT INTO {{.schema}}.queue (seq, tool_name, business_scope, kind, status, attempts, next_attempt_at,
                                       not_before, first_attempt_at, lease_token, lease_expires_at, leased_by,
                                       reclaimed_lease, last_error, last_problem, response, response_status,
                                       note, cancel_cause, updated_at, payload_bytes)
        VALUES (NEW.seq, NEW.tool_name, NEW.business_scope, NEW.kind, coalesce(NEW.status, 'pending'),
                coalesce(NEW.attempts, 0), coalesce(NEW.next_attempt_at, now()), NEW.not_before,
                NEW.first_attempt_at, NEW.lease_token, NEW.lease_expires_at, NEW.leased_by, NEW.reclaimed_lease,
                NEW.last_error, NEW.last_problem, NEW.response, NEW.response_status, NEW.note, NEW.cancel_cause,
                coalesce(NEW.updated_at, now()), v_bytes)
        RETURNING status, attempts, next_attempt_at, updated_at
             INTO NEW.status, NEW.attempts, NEW.next_attempt_at, NEW.updated_at;
        RETURN NEW;
    END IF;
    UPDATE {{.schema}}.queue q
       SET status = NEW.status, attempts = NEW.attempts, next_attempt_at = NEW.next_attempt_at,
           not_before = NEW.not_before, first_attempt_at = NEW.first_attempt_at, lease_token = NEW.lease_token,
           lease_expires_at = NEW.lease_expires_at, leased_by = NEW.leased_by,
           reclaimed_lease = NEW.reclaimed_lease, last_error = NEW.last_error, last_problem = NEW.last_problem,
           response = NEW.response, response_status = NEW.response_status, note = NEW.note,
           cancel_cause = NEW.cancel_cause, updated_at = NEW.updated_at
     WHERE q.seq = OLD.seq
       AND (q.status, q.attempts, q.next_attempt_at, q.not_before, q.first_attempt_at, q.lease_token,
            q.lease_expires_at, q.leased_by, q.reclaimed_lease, q.last_error, q.last_problem, q.response,
            q.response_status, q.note, q.cancel_cause, q.updated_at)
           IS NOT DISTINCT FROM
           (OLD.status, OLD.attempts, OLD.next_attempt_at, OLD.not_before, OLD.first_attempt_at, OLD.lease_token,
            OLD.lease_expires_at, OLD.leased_by, OLD.reclaimed_lease, OLD.last_error, OLD.last_problem, OLD.response,
            OLD.response_status, OLD.note, OLD.cancel_cause, OLD.updated_at)
    RETURNING q.next_attempt_at INTO NEW.next_attempt_at;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF (NEW.key, NEW.agent_run_id, NEW.step_id, NEW.tool_name, NEW.business_scope, NEW.kind, NEW.payload,
        NEW.payload_hash, NEW.forward_key, NEW.traceparent, NEW.created_at, NEW.seq)
       IS DISTINCT FROM
       (OLD.key, OLD.agent_run_id, OLD.step_id, OLD.tool_name, OLD.business_scope, OLD.kind, OLD.payload,
        OLD.payload_hash, OLD.forward_key, OLD.traceparent, OLD.created_at, OLD.seq) THEN
        IF NEW.seq IS DISTINCT FROM OLD.seq OR NEW.tool_name IS DISTINCT FROM OLD.tool_name
           OR NEW.business_scope IS DISTINCT FROM OLD.business_scope OR NEW.kind IS DISTINCT FROM OLD.kind THEN
            RAISE EXCEPTION USING ERRCODE = '0A000',
                MESSAGE = format('drainer.outbox: seq, tool_name, business_scope and kind of row %s cannot change', OLD.key);
        END IF;
        UPDATE {{.schema}}.intents i
           SET key = NEW.key, agent_run_id = NEW.agent_run_id, step_id = NEW.step_id, payload = NEW.payload,
               payload_hash = NEW.payload_hash, forward_key = NEW.forward_key, traceparent = NEW.traceparent,
               created_at = NEW.created_at
         WHERE i.seq = OLD.seq
        RETURNING pg_column_size(i.payload) INTO v_bytes;
        IF NEW.payload IS DISTINCT FROM OLD.payload THEN
            UPDATE {{.schema}}.queue q SET payload_bytes = v_bytes WHERE q.seq = OLD.seq;
        END IF;
    END IF;
    RETURN NEW;
END
$function$;
