-- One wake notification per inserting statement (notify_outbox).
CREATE OR REPLACE TRIGGER queue_notify
    AFTER INSERT ON {{.schema}}.queue
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION {{.schema}}.notify_outbox();
