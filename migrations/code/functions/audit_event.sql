-- audit_event names a status change.
CREATE OR REPLACE FUNCTION {{.schema}}.audit_event(from_status text, to_status text)
 RETURNS text
 LANGUAGE sql
 STABLE
AS $function$
    SELECT coalesce(nullif(current_setting('drainer.action', true), ''),
        CASE
            WHEN from_status IS NULL THEN 'enqueued'
            WHEN to_status = 'in_flight' THEN 'claimed'
            WHEN from_status = 'in_flight' AND to_status = 'pending' THEN 'rescheduled'
            ELSE to_status
        END)
$function$;
