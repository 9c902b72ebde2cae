-- Fires only for statements that set next_attempt_at or not_before (claims
-- do neither), and calls its function only when the floor is broken.
CREATE OR REPLACE TRIGGER queue_keep_not_before
    BEFORE UPDATE OF next_attempt_at, not_before ON {{.schema}}.queue
    FOR EACH ROW
    WHEN (NEW.next_attempt_at < NEW.not_before)
    EXECUTE FUNCTION {{.schema}}.keep_not_before();
