-- check_tuple raises 22023 naming every invalid field of a tuple.
CREATE OR REPLACE FUNCTION {{.schema}}.check_tuple(agent_run_id text, step_id text, tool_name text, business_scope text)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
DECLARE
    problems text[] := '{}';
    names    text[] := ARRAY['agent_run_id', 'step_id', 'tool_name', 'business_scope'];
    vals     text[] := ARRAY[agent_run_id, step_id, tool_name, business_scope];
BEGIN
    FOR i IN 1..4 LOOP
        IF vals[i] IS NULL THEN
            problems := problems || (names[i] || ' must not be null');
        ELSIF i < 4 AND vals[i] = '' THEN
            problems := problems || (names[i] || ' must not be empty');
        ELSIF octet_length(vals[i]) > 1024 THEN
            problems := problems || format('%s is %s bytes, more than the limit of 1024', names[i], octet_length(vals[i]));
        END IF;
    END LOOP;
    IF cardinality(problems) > 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = 'drainer.enqueue: invalid intent tuple: ' || array_to_string(problems, '; ');
    END IF;
END
$function$;
