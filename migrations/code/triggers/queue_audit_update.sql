-- Every status or attempts change is an entry of the row's audit chain,
-- whoever makes it. A statement that appends its own entries moves the
-- row's audit_head (store.Complete); every other change of status or
-- attempts is recorded by audit_change, before the row is written. A claim
-- (pending -> in_flight) writes none: the entry that ends the attempt
-- records it. The condition is all the drain's statements pay.
CREATE OR REPLACE TRIGGER queue_audit_update
    BEFORE UPDATE ON {{.schema}}.queue
    FOR EACH ROW
    WHEN ((OLD.status IS DISTINCT FROM NEW.status OR OLD.attempts IS DISTINCT FROM NEW.attempts)
          AND NOT (OLD.status = 'pending' AND NEW.status = 'in_flight')
          AND NEW.audit_head IS NOT DISTINCT FROM OLD.audit_head)
    EXECUTE FUNCTION {{.schema}}.audit_change();
