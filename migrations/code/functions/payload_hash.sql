-- payload_hash is the hash payloads are compared by: SHA-256 of
-- payload_text, so payloads equal as JSON values hash alike.
CREATE OR REPLACE FUNCTION {{.schema}}.payload_hash(payload jsonb)
 RETURNS bytea
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
AS $function$
    SELECT sha256(convert_to({{.schema}}.payload_text(payload), 'UTF8'))
$function$;
