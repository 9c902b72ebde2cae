-- Every row's creation is the first entry of its audit chain. The enqueue
-- functions append it themselves and set the row's audit_head; any other
-- insert (a compensation row, an alert row, a write through drainer.outbox,
-- another role's) is recorded by audit_rows, before the row is written.
CREATE OR REPLACE TRIGGER queue_audit_insert
    BEFORE INSERT ON {{.schema}}.queue
    FOR EACH ROW
    WHEN (NEW.audit_head IS NULL)
    EXECUTE FUNCTION {{.schema}}.audit_rows();
