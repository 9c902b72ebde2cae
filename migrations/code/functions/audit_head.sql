-- audit_head is the hash a key's next entry links to: its latest entry, or
-- the anchor left when retention pruned the chain's older entries.
--
-- The anchor is read FOR KEY SHARE (so the function is VOLATILE): the
-- sweep of forgotten chains (audit_retire_anchors) keeps an anchor that a
-- new entry links to, and an entry appended after the sweep removed it
-- finds none, and starts the chain again (under REPEATABLE READ, whose
-- snapshot may still see it, the lock fails to serialize instead).
-- enqueue_batch reads it so inline.
--
-- PL/pgSQL, not SQL: a SQL function whose body holds a subquery is never
-- inlined, so each statement that calls it parses and plans its body
-- again, and a single enqueue (one call per transaction) paid that on
-- every call; PL/pgSQL keeps the plan for the session. Statements that
-- need the head of many keys at once (enqueue_batch) read it inline, with
-- the same two look-ups, planned once for all their rows.
--
-- "ORDER BY a.id + 0": the latest entry is found among the key's own
-- entries (the per-key hash index), never by reading the id index
-- backwards until an entry of the key turns up. The planner takes that
-- second way when it expects many entries per key, as it does for a
-- generation not yet analyzed (the default selectivity of an equality):
-- it then read the whole generation for a key that has no entry (every
-- enqueue of a new key), and `audit verify` read as many entries for each
-- row of the queue (TestAuditKeyLookupsReadOneKey). Every look-up of a
-- key's latest entry is written so (enqueue_batch), or aggregates the
-- key's entries in id order, which reads them through the same index
-- (audit_problems, the retention of tombstones).
CREATE OR REPLACE FUNCTION {{.schema}}.audit_head(p_key text)
 RETURNS bytea
 LANGUAGE plpgsql
AS $function$
BEGIN
    RETURN coalesce((SELECT a.hash FROM {{.schema}}.audit a WHERE a.key = p_key ORDER BY a.id + 0 DESC LIMIT 1),
                    (SELECT x.hash FROM {{.schema}}.audit_anchors x WHERE x.key = p_key FOR KEY SHARE));
END
$function$;
