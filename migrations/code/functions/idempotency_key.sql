-- idempotency_key is the row key of a tuple (docs/reference.md §1):
-- "idem_v1_" and the first 32 hex digits of the SHA-256 of canonical_tuple.
-- It reproduces idemkey.Tuple.Key byte for byte (key vectors checked).
CREATE OR REPLACE FUNCTION {{.schema}}.idempotency_key(agent_run_id text, step_id text, tool_name text, business_scope text)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE STRICT
AS $function$
    SELECT 'idem_v1_' || left(encode(sha256(convert_to(
        {{.schema}}.canonical_tuple($1, $2, $3, $4), 'UTF8')), 'hex'), 32)
$function$;
