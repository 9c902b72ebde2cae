-- payload_text is the text the payload hash is taken over: jsonb's own text
-- when it holds no number with a trailing fractional zero (the quick test
-- may also match inside a string, which only costs the slow path), else the
-- canonical text (canonical_text).
CREATE OR REPLACE FUNCTION {{.schema}}.payload_text(payload jsonb)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
AS $function$
    SELECT CASE WHEN payload::text ~ '\.[0-9]*0\M' THEN {{.schema}}.canonical_text(payload::text)
                ELSE payload::text END
$function$;
