-- audit_verify checks every chain (audit_problems) and the ledger that
-- chains the audit's records and anchors (audit_ledger_problems), and
-- returns their problems, the chains' first, each by id, at most p_limit.
-- Without JIT: the plan of a whole-audit check is costed far above the
-- JIT thresholds, and compiling it took longer than running it.
CREATE OR REPLACE FUNCTION {{.schema}}.audit_verify(p_limit integer DEFAULT 100)
 RETURNS TABLE(id bigint, key text, problem text)
 LANGUAGE sql
 STABLE
 SET jit TO 'off'
AS $function$
    SELECT p.id, p.key, p.problem
      FROM (SELECT 0 AS o, c.id, c.key, c.problem FROM {{.schema}}.audit_problems(NULL) c
            UNION ALL
            SELECT 1, l.id, l.key, l.problem FROM {{.schema}}.audit_ledger_problems() l) p
     ORDER BY p.o, p.id, p.key, p.problem
     LIMIT p_limit
$function$;
