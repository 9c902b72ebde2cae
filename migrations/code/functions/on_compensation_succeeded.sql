-- A compensation row that succeeded marks its forward row compensated, in the
-- same transaction.
CREATE OR REPLACE FUNCTION {{.schema}}.on_compensation_succeeded()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    UPDATE {{.schema}}.queue f
       SET status = 'compensated', updated_at = now()
      FROM {{.schema}}.intents c
      JOIN {{.schema}}.intents fi ON fi.key = c.forward_key
     WHERE c.seq = NEW.seq AND f.seq = fi.seq AND f.status = 'succeeded';
    PERFORM pg_notify('{{.schema}}.outbox', '');
    RETURN NULL;
END
$function$;
