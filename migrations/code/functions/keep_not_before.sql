-- keep_not_before holds a row's floor: not_before is the earliest moment the
-- provider allows the row's next attempt (its Retry-After, capped, or the
-- backoff the last answer put under next_attempt_at). Only the completion
-- of an attempt sets it and `requeue --ignore-retry-after` clears it; every
-- other writer of next_attempt_at (a resume, a reload, a deferral, a
-- reclaim, a revive) may only move the row to a time at or after it. The
-- trigger outbox_keep_not_before calls this for every statement that would
-- break the floor, whoever runs it.
CREATE OR REPLACE FUNCTION {{.schema}}.keep_not_before()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    NEW.next_attempt_at := NEW.not_before;
    RETURN NEW;
END
$function$;
