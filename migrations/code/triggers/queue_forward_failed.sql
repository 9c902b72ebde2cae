-- A forward row that ends failed (not an alert row) aborts its run.
CREATE OR REPLACE TRIGGER queue_forward_failed
    AFTER UPDATE OF status ON {{.schema}}.queue
    FOR EACH ROW
    WHEN (NEW.status = 'failed' AND OLD.status IS DISTINCT FROM 'failed' AND NEW.kind = 'forward'
          AND NEW.tool_name <> {{.schema}}.alert_tool())
    EXECUTE FUNCTION {{.schema}}.on_forward_failed();
