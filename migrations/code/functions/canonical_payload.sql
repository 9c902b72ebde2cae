-- canonical_payload is payload as a JSON value: numbers with their
-- trailing fractional zeros trimmed. Equal JSON values have equal canonical
-- text. (Numbers are compared exactly as decimals: two numbers that differ
-- past a double's precision stay different.) Its text is canonical_text's,
-- which the payload hash is taken over.
CREATE OR REPLACE FUNCTION {{.schema}}.canonical_payload(payload jsonb)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
AS $function$
    SELECT {{.schema}}.canonical_text(payload::text)::jsonb
$function$;
