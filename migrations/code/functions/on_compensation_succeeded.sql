-- A compensation row that succeeded marks its forward row compensated, in the
-- same transaction.
CREATE OR REPLACE FUNCTION {{.schema}}.on_compensation_succeeded()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    UPDATE {{.schema}}.outbox f
       SET status = 'compensated', updated_at = now()
     WHERE f.key = NEW.forward_key AND f.status = 'succeeded';
    PERFORM pg_notify('{{.schema}}.outbox', '');
    RETURN NULL;
END
$function$;
