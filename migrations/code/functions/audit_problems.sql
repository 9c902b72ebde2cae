-- audit_problems checks the chains, of every key or of p_key, and returns
-- their problems (unordered):
--
-- - broken links (audit_chain_problems): an entry edited, removed or
--   inserted;
-- - every queue row must stand where its chain ends: its audit_head the
--   chain's last hash, its status and attempts those of the last entry
--   that records a status (an in_flight row's last entry is the pending it
--   was claimed from, one attempt fewer, or as many when the claim counted
--   none: its tool had no route at the claimer), or, once those entries are
--   truncated, those its anchor kept; a pruned key's tombstone its
--   chain's last hash and status, and a chain (entries, or an anchor). So deleting
--   a chain's last entry, or its anchor, or a change made with the audit
--   bypassed, is caught, before and after rotation;
-- - every key of the key space has its row until retention prunes it (the
--   same transaction writes its tombstone), and a row is an intent with
--   its queue row (written, moved and pruned together): a key neither
--   pruned nor with a row, an intent without its queue row or a queue row
--   without its intent, had its row deleted outside retention (through
--   drainer.outbox, or its tables), which no trigger records. The key, or
--   the half left, stays until a tombstone replaces it, so this is
--   reported for as long, rotation or not;
-- - what the rotation found wrong in the entries it anchored (an anchor
--   keeps it: rotate_audit), and an anchor version whose content no longer
--   matches its hash.
--
-- audit_verify (every chain, and the ledger, without JIT) and the console
-- (one key) read it; it stays a plain SQL function, so that either inlines
-- it and plans it for the key it gives.
CREATE OR REPLACE FUNCTION {{.schema}}.audit_problems(p_key text)
 RETURNS TABLE(id bigint, key text, problem text)
 LANGUAGE sql
 STABLE
AS $function$
    SELECT c.id, c.key, c.problem FROM {{.schema}}.audit_chain_problems(p_key, NULL) c
    UNION ALL
    -- every row's state is its chain's last entry, or its anchor's (a
    -- claim writes no entry: an in_flight row's last entry is the pending
    -- it came from)
    SELECT coalesce(h.id, x.last_id, 0), i.key,
           CASE WHEN q.audit_head IS NOT NULL AND q.audit_head IS DISTINCT FROM coalesce(h.hash, x.hash)
                THEN 'the row''s audit head is not its chain''s last entry (an entry was removed)'
                WHEN q.status IS DISTINCT FROM s.status AND NOT (q.status = 'in_flight' AND s.status = 'pending')
                THEN format('the row is %s but its chain''s last change records %s (a change was not recorded)',
                            q.status, s.status)
                ELSE format('the row has %s attempts but its chain''s last change records %s (a change was not recorded)',
                            q.attempts, s.attempts)
           END
      FROM {{.schema}}.queue q
      JOIN {{.schema}}.intents i ON i.seq = q.seq
      -- the key's entries read once (through the per-key index, no order
      -- by the id index: see audit_head.sql): its last entry, and its last
      -- entry that records a status (an operator's note on the row,
      -- audit_append, records none)
     CROSS JOIN LATERAL (SELECT max(a.id) AS id, (array_agg(a.hash ORDER BY a.id DESC))[1] AS hash,
                                max(a.id) FILTER (WHERE a.to_status IS NOT NULL) AS status_id,
                                (array_agg(a.to_status ORDER BY a.id DESC) FILTER (WHERE a.to_status IS NOT NULL))[1] AS to_status,
                                (array_agg(a.attempts ORDER BY a.id DESC) FILTER (WHERE a.to_status IS NOT NULL))[1] AS attempts
                           FROM {{.schema}}.audit a WHERE a.key = i.key) h
      LEFT JOIN {{.schema}}.audit_anchors x ON x.key = i.key
     CROSS JOIN LATERAL (SELECT CASE WHEN h.status_id IS NOT NULL THEN h.to_status ELSE x.status END AS status,
                                CASE WHEN h.status_id IS NOT NULL THEN h.attempts ELSE x.attempts END AS attempts) s
     WHERE (p_key IS NULL OR i.key = p_key)
       AND ((q.audit_head IS NOT NULL AND q.audit_head IS DISTINCT FROM coalesce(h.hash, x.hash))
            OR (s.status IS NOT NULL AND q.status IS DISTINCT FROM s.status
                AND NOT (q.status = 'in_flight' AND s.status = 'pending'))
            -- an in_flight row has one attempt more than the pending it
            -- was claimed from, or as many when its claimer had no route
            -- for it and counted none (store.Claim.Routed)
            OR (s.status IS NOT NULL AND s.attempts IS NOT NULL
                AND q.attempts IS DISTINCT FROM s.attempts
                AND NOT (q.status = 'in_flight' AND s.status = 'pending' AND q.attempts = s.attempts + 1)))
    UNION ALL
    -- a pruned row's tombstone keeps the status it was pruned in and its
    -- chain's head (a tombstone without a head, of a row that had none, is
    -- checked by its status alone), and its chain stays (entries, or their
    -- anchor) and ends there
    SELECT coalesce(h.id, x.last_id, 0), k.key,
           CASE WHEN h.id IS NULL AND x.key IS NULL
                THEN 'the pruned key''s chain is gone: no entry, no anchor (its anchor was removed)'
                WHEN k.audit_head IS NOT NULL AND k.audit_head IS DISTINCT FROM coalesce(h.hash, x.hash)
                THEN 'the pruned key''s audit head is not its chain''s last entry (an entry was inserted or removed after it was pruned)'
                ELSE format('the key was pruned %s but its chain''s last change records %s (a change was not recorded)',
                            k.final_status, s.status)
           END
      FROM {{.schema}}.keys k
     CROSS JOIN LATERAL (SELECT max(a.id) AS id, (array_agg(a.hash ORDER BY a.id DESC))[1] AS hash,
                                max(a.id) FILTER (WHERE a.to_status IS NOT NULL) AS status_id,
                                (array_agg(a.to_status ORDER BY a.id DESC) FILTER (WHERE a.to_status IS NOT NULL))[1] AS to_status
                           FROM {{.schema}}.audit a WHERE a.key = k.key) h
      LEFT JOIN {{.schema}}.audit_anchors x ON x.key = k.key
     CROSS JOIN LATERAL (SELECT CASE WHEN h.status_id IS NOT NULL THEN h.to_status ELSE x.status END AS status) s
     WHERE k.pruned_at IS NOT NULL AND (p_key IS NULL OR k.key = p_key)
       AND NOT EXISTS (SELECT 1 FROM {{.schema}}.intents i WHERE i.key = k.key)
       AND ((h.id IS NULL AND x.key IS NULL)
            OR (k.audit_head IS NOT NULL AND k.audit_head IS DISTINCT FROM coalesce(h.hash, x.hash))
            OR (s.status IS NOT NULL AND k.final_status IS DISTINCT FROM s.status))
    UNION ALL
    -- a key whose row is gone, without a tombstone: deleted outside
    -- retention (an enqueue writes the key and the row in one
    -- transaction, and retention marks the key pruned in the one that
    -- deletes the row)
    SELECT coalesce((SELECT max(a.id) FROM {{.schema}}.audit a WHERE a.key = k.key), x.last_id, 0), k.key,
           'the key''s row is gone and it has no tombstone: deleted outside retention, its intent lost'
      FROM {{.schema}}.keys k
      LEFT JOIN {{.schema}}.audit_anchors x ON x.key = k.key
     WHERE k.pruned_at IS NULL AND (p_key IS NULL OR k.key = p_key)
       AND NOT EXISTS (SELECT 1 FROM {{.schema}}.intents i WHERE i.key = k.key)
    UNION ALL
    SELECT coalesce((SELECT max(a.id) FROM {{.schema}}.audit a WHERE a.key = i.key), 0), i.key,
           format('the intent (seq %s) has no queue row: its row was deleted outside retention', i.seq)
      FROM {{.schema}}.intents i
     WHERE (p_key IS NULL OR i.key = p_key)
       AND NOT EXISTS (SELECT 1 FROM {{.schema}}.queue q WHERE q.seq = i.seq)
    UNION ALL
    SELECT 0, 'seq:' || q.seq,
           format('the queue row (seq %s, %s, tool %s) has no intent: its intent was deleted', q.seq, q.status, q.tool_name)
      FROM {{.schema}}.queue q
     WHERE p_key IS NULL
       AND NOT EXISTS (SELECT 1 FROM {{.schema}}.intents i WHERE i.seq = q.seq)
    UNION ALL
    -- the anchors: what they were found to stand for, and their content
    SELECT coalesce(v.last_id, 0), v.key,
           CASE WHEN v.record IS NOT NULL
                 AND v.row_hash IS DISTINCT FROM {{.schema}}.audit_anchor_hash(v.vid, v.key, v.hash, v.last_id, v.status,
                                                                        v.attempts, v.problem, v.record)
                THEN format('anchor %s does not match its hash (edited)', v.vid)
                -- a ledger record's own finding (rotate_audit): it names the
                -- chains it may be about
                WHEN v.key LIKE 'ledger:%' THEN v.problem
                ELSE 'the entries this anchor stands for were found broken when anchored: ' || v.problem
           END
      FROM (SELECT x.vid, x.key, x.hash, x.last_id, x.status, x.attempts, x.problem, x.record, x.row_hash
              FROM {{.schema}}.audit_anchors x
             UNION ALL
            SELECT h.vid, h.key, h.hash, h.last_id, h.status, h.attempts, h.problem, h.record, h.row_hash
              FROM {{.schema}}.audit_anchor_history h) v
     WHERE (p_key IS NULL OR v.key = p_key)
       AND (v.problem IS NOT NULL
            OR (v.record IS NOT NULL
                AND v.row_hash IS DISTINCT FROM {{.schema}}.audit_anchor_hash(v.vid, v.key, v.hash, v.last_id, v.status,
                                                                       v.attempts, v.problem, v.record)))
$function$;
