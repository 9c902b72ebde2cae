-- canonical_payload is payload as a JSON value: numbers with their
-- trailing fractional zeros trimmed. Equal JSON values have equal canonical
-- text. (Numbers are compared exactly as decimals: two numbers that differ
-- past a double's precision stay different.)
CREATE OR REPLACE FUNCTION {{.schema}}.canonical_payload(payload jsonb)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
AS $function$
    SELECT CASE jsonb_typeof(payload)
        WHEN 'number' THEN to_jsonb(trim_scale(payload::numeric))
        WHEN 'object' THEN coalesce((SELECT jsonb_object_agg(e.k, {{.schema}}.canonical_payload(e.v))
                                       FROM jsonb_each(payload) AS e(k, v)), '{}'::jsonb)
        WHEN 'array' THEN coalesce((SELECT jsonb_agg({{.schema}}.canonical_payload(e.v) ORDER BY e.i)
                                      FROM jsonb_array_elements(payload) WITH ORDINALITY AS e(v, i)), '[]'::jsonb)
        ELSE payload END
$function$;
