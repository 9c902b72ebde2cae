-- intent_key is idempotency_key (with canonical_tuple) in one expression,
-- declared STABLE, which is what its body is (to_json, convert_to): the
-- planner then inlines it where enqueue and enqueue_batch call it, instead
-- of running it as a function call per intent (a non-inlinable SQL function
-- costs ten times its body). idempotency_key keeps its IMMUTABLE
-- declaration for callers that index it. The key vectors are checked
-- through both.
CREATE OR REPLACE FUNCTION {{.schema}}.intent_key(agent_run_id text, step_id text, tool_name text, business_scope text)
 RETURNS text
 LANGUAGE sql
 STABLE PARALLEL SAFE STRICT
AS $function$
    SELECT 'idem_v1_' || left(encode(sha256(convert_to(
        '{"agent_run_id":' || to_json($1)::text || ',"business_scope":' || to_json($4)::text
        || ',"step_id":' || to_json($2)::text || ',"tool_name":' || to_json($3)::text || '}',
        'UTF8')), 'hex'), 32)
$function$;
