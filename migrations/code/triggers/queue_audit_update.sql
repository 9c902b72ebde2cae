-- Every status or attempts change is an entry of the row's audit chain
-- (audit_rows), whoever makes it.
CREATE OR REPLACE TRIGGER queue_audit_update
    AFTER UPDATE ON {{.schema}}.queue
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {{.schema}}.audit_rows();
