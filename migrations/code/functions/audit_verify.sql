-- audit_verify checks every chain and returns its broken links, first
-- first, at most p_limit (audit_problems says what is checked).
CREATE OR REPLACE FUNCTION {{.schema}}.audit_verify(p_limit integer DEFAULT 100)
 RETURNS TABLE(id bigint, key text, problem text)
 LANGUAGE sql
 STABLE
AS $function$
    SELECT p.id, p.key, p.problem FROM {{.schema}}.audit_problems(NULL) p ORDER BY p.id LIMIT p_limit
$function$;
