-- canonical_tuple and idempotency_key reproduce idemkey.Tuple.Canonical and
-- .Key byte for byte: to_json(text) escapes exactly as RFC 8785 does.
CREATE OR REPLACE FUNCTION {{.schema}}.canonical_tuple(agent_run_id text, step_id text, tool_name text, business_scope text)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
AS $function$
    SELECT '{"agent_run_id":' || to_json($1)::text
        || ',"business_scope":' || to_json($4)::text
        || ',"step_id":' || to_json($2)::text
        || ',"tool_name":' || to_json($3)::text || '}'
$function$;
