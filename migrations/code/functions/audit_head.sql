-- audit_head is the hash a key's next entry links to: its latest entry, or
-- the anchor left when retention pruned the chain's older entries.
--
-- PL/pgSQL, not SQL: a SQL function whose body holds a subquery is never
-- inlined, so each statement that calls it parses and plans its body
-- again, and a single enqueue (one call per transaction) paid that on
-- every call; PL/pgSQL keeps the plan for the session. Statements that
-- need the head of many keys at once (enqueue_batch) read it inline, with
-- the same two look-ups, planned once for all their rows.
CREATE OR REPLACE FUNCTION {{.schema}}.audit_head(p_key text)
 RETURNS bytea
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    RETURN coalesce((SELECT a.hash FROM {{.schema}}.audit a WHERE a.key = p_key ORDER BY a.id DESC LIMIT 1),
                    (SELECT x.hash FROM {{.schema}}.audit_anchors x WHERE x.key = p_key));
END
$function$;
