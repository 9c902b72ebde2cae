-- Writes through the outbox view go to intents and queue (outbox_write).
CREATE OR REPLACE TRIGGER outbox_write
    INSTEAD OF INSERT OR UPDATE OR DELETE ON {{.schema}}.outbox
    FOR EACH ROW EXECUTE FUNCTION {{.schema}}.outbox_write();
