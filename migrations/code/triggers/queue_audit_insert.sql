-- Every row's creation is the first entry of its audit chain (audit_rows).
CREATE OR REPLACE TRIGGER queue_audit_insert
    AFTER INSERT ON {{.schema}}.queue
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {{.schema}}.audit_rows();
