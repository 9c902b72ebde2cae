-- audit_chain_problems returns the broken links of the chains of every key,
-- of p_key, or of the keys with entries in generation p_part (unordered),
-- with the generation of each entry: an entry whose prev_hash is not the
-- hash of the entry before it (an entry was deleted or inserted), or whose
-- hash does not match its content (it was edited). A chain's first
-- remaining entry links to the anchor that stands for the entries before
-- it: the latest anchor version (audit_anchors, audit_anchor_history) whose
-- last entry comes before it (one written before migration 022, which
-- names none, comes before every entry). And a change that was not
-- recorded: an entry whose from_status is not the to_status of the chain's
-- change before it (that entry's, or, for the first remaining one, the
-- anchor's that stands before it), a claim aside (pending to in_flight
-- writes no entry). So a status changed with the audit bypassed stays
-- evident after later changes of the row, its pruning and the
-- truncation of its entries, as does a forged entry that ends a chain.
-- audit_problems reads it, and rotate_audit before it anchors a
-- generation (what it finds is kept in the anchor for good).
--
-- The keys of generation p_part are a semi-join (hashed, batched to disk
-- when they outgrow work_mem), never a filter tested on each entry: that
-- filter, under an OR, searched its list of keys once per entry whenever
-- the list outgrew work_mem, so anchoring a generation of 200,000 entries
-- took hours; each entry is now read a bounded number of times
-- (TestAnchoringReadsEachEntryBoundedTimes).
CREATE OR REPLACE FUNCTION {{.schema}}.audit_chain_problems(p_key text, p_part smallint)
 RETURNS TABLE(id bigint, key text, part smallint, problem text)
 LANGUAGE sql
 STABLE
AS $function$
    WITH entries AS NOT MATERIALIZED (
        SELECT a.* FROM {{.schema}}.audit a
         WHERE p_part IS NULL AND (p_key IS NULL OR a.key = p_key)
        UNION ALL
        SELECT a.* FROM {{.schema}}.audit a
         WHERE p_part IS NOT NULL AND (p_key IS NULL OR a.key = p_key)
           AND a.key IN (SELECT e.key FROM {{.schema}}.audit e WHERE e.part = p_part)
    )
    , chain AS (
        SELECT a.*, CASE WHEN lag(a.id) OVER w IS NOT NULL THEN lag(a.hash) OVER w
                         ELSE (SELECT v.hash
                                 FROM (SELECT x.hash, x.last_id, x.vid FROM {{.schema}}.audit_anchors x WHERE x.key = a.key
                                       UNION ALL
                                       SELECT h.hash, h.last_id, h.vid FROM {{.schema}}.audit_anchor_history h WHERE h.key = a.key) v
                                WHERE coalesce(v.last_id, 0) < a.id
                                ORDER BY coalesce(v.last_id, 0) DESC, v.vid DESC LIMIT 1)
                    END AS expected_prev
          FROM entries a
        WINDOW w AS (PARTITION BY a.key ORDER BY a.id)
    )
    , status_chain AS (
        SELECT a.id, a.key, a.part, a.from_status,
               CASE WHEN lag(a.id) OVER w IS NOT NULL THEN lag(a.to_status) OVER w
                    ELSE (SELECT v.status
                            FROM (SELECT x.status, x.last_id, x.vid FROM {{.schema}}.audit_anchors x WHERE x.key = a.key
                                  UNION ALL
                                  SELECT h.status, h.last_id, h.vid FROM {{.schema}}.audit_anchor_history h WHERE h.key = a.key) v
                           WHERE coalesce(v.last_id, 0) < a.id
                           ORDER BY coalesce(v.last_id, 0) DESC, v.vid DESC LIMIT 1)
               END AS prev_status
          FROM entries a
         WHERE a.to_status IS NOT NULL
        WINDOW w AS (PARTITION BY a.key ORDER BY a.id)
    )
    SELECT s.id, s.key, s.part,
           format('the entry records a change from %s, but the change before it ended in %s (a change was not recorded)',
                  s.from_status, s.prev_status)
      FROM status_chain s
     WHERE s.from_status IS NOT NULL AND s.prev_status IS NOT NULL
       AND s.from_status IS DISTINCT FROM s.prev_status
       AND NOT (s.prev_status = 'pending' AND s.from_status = 'in_flight')
    UNION ALL
    SELECT c.id, c.key, c.part,
           CASE WHEN c.hash IS DISTINCT FROM {{.schema}}.audit_hash(c.prev_hash, c.key, c.at, c.event, c.from_status,
                      c.to_status, c.attempts, c.response_status, c.actor, c.reason, c.detail_sha256)
                THEN 'entry content does not match its hash (edited)'
                ELSE 'prev_hash does not match the previous entry of this key (an entry was removed or inserted)'
           END
      FROM chain c
     WHERE c.hash IS DISTINCT FROM {{.schema}}.audit_hash(c.prev_hash, c.key, c.at, c.event, c.from_status,
                 c.to_status, c.attempts, c.response_status, c.actor, c.reason, c.detail_sha256)
        OR c.prev_hash IS DISTINCT FROM c.expected_prev
$function$;
