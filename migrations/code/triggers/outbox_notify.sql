-- One wake notification per inserting statement (notify_outbox).
CREATE OR REPLACE TRIGGER outbox_notify
    AFTER INSERT ON {{.schema}}.outbox
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION {{.schema}}.notify_outbox();
