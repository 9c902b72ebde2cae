-- A compensation row that succeeded marks its forward row compensated.
CREATE OR REPLACE TRIGGER queue_compensation_succeeded
    AFTER UPDATE OF status ON {{.schema}}.queue
    FOR EACH ROW
    WHEN (NEW.kind = 'compensation' AND NEW.status = 'succeeded' AND OLD.status IS DISTINCT FROM 'succeeded')
    EXECUTE FUNCTION {{.schema}}.on_compensation_succeeded();
