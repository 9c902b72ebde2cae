-- audit_retire_anchors does one step of the sweep of forgotten chains'
-- anchors (rotate_audit, after each truncation: audit_sweep): it takes the
-- next 'anchors' record of the ledger after p_after and removes those of
-- its versions whose chain is forgotten, and says how many ('retired N').
--
-- A chain is forgotten when its key has no row, no tombstone and no entry
-- left (audit_chain_forgotten): no entry can link to its anchor any more
-- but a new one's, which starts the chain again from its anchor or, once
-- the anchor is gone, from nothing (audit_head), and no row or tombstone
-- is compared with it. A chain's older versions (audit_anchor_history) go
-- before its current one, which a new entry would link to: a chain check
-- expects an entry after an older version to link to it. Kept, as
-- evidence, are versions that record a problem and versions whose content
-- no longer matches their hash, and the record is left whole when its
-- versions no longer digest as the ledger says they did (its own record,
-- or its latest 'retired' one): audit verify goes on reporting them.
--
-- The versions removed are stated by a 'retired' record: which anchors
-- record (from_id), and the digest of the versions left (items, vector,
-- as audit_anchors_vector computes them), which verify checks from then
-- on in place of the anchors record's own.
--
-- A new entry reads its chain's anchor FOR KEY SHARE (audit_head,
-- enqueue_batch): the versions are locked here first, SKIP LOCKED, so one
-- that a writer read is kept, and a writer that comes after the lock
-- waits and then finds the anchor gone (or, under REPEATABLE READ, fails
-- to serialize and is tried again); the second statement, with a new
-- snapshot, checks again what the first saw.
--
-- The caller (rotate_audit) holds the rotation's and the ledger's locks;
-- owner's rights.
CREATE OR REPLACE FUNCTION {{.schema}}.audit_retire_anchors(p_after bigint)
 RETURNS text
 LANGUAGE plpgsql
AS $function$
DECLARE
    r        record;
    v_items  bigint;
    v_digest bytea;
    v_b      integer;
    v_vec    bytea;
    v_now    bigint;
    v_vids   bigint[];
    v_gone   bigint;
    v_more   bigint;
BEGIN
    SELECT l.n, l.epoch, l.part, l.upto_id INTO r
      FROM {{.schema}}.audit_ledger l WHERE l.kind = 'anchors' AND l.n > p_after ORDER BY l.n LIMIT 1;
    IF NOT FOUND THEN
        UPDATE {{.schema}}.audit_sweep SET after_record = NULL;
        RETURN 'retired 0';
    END IF;
    UPDATE {{.schema}}.audit_sweep SET after_record = r.n;

    -- What the record's versions digest to now must be what the ledger
    -- says of them last.
    SELECT t.items, t.digest, t.buckets INTO v_items, v_digest, v_b
      FROM {{.schema}}.audit_ledger t
     WHERE t.n = r.n OR (t.kind = 'retired' AND t.from_id = r.n)
     ORDER BY t.n DESC LIMIT 1;
    SELECT v.items, v.vector INTO v_now, v_vec FROM {{.schema}}.audit_anchors_vector(r.n, v_b) v;
    IF v_now <> v_items OR sha256(v_vec) IS DISTINCT FROM v_digest THEN
        RETURN 'retired 0';
    END IF;

    SELECT coalesce(array_agg(x.vid), '{}') INTO v_vids
      FROM (SELECT x.vid FROM {{.schema}}.audit_anchors x
             WHERE x.record = r.n AND x.problem IS NULL
               AND x.row_hash = {{.schema}}.audit_anchor_hash(x.vid, x.key, x.hash, x.last_id, x.status, x.attempts,
                                                              x.problem, x.record)
               AND {{.schema}}.audit_chain_forgotten(x.key)
               AND NOT EXISTS (SELECT 1 FROM {{.schema}}.audit_anchor_history h WHERE h.key = x.key)
               FOR UPDATE OF x SKIP LOCKED) x;
    DELETE FROM {{.schema}}.audit_anchors x
     WHERE x.vid = ANY (v_vids) AND {{.schema}}.audit_chain_forgotten(x.key);
    GET DIAGNOSTICS v_gone = ROW_COUNT;
    DELETE FROM {{.schema}}.audit_anchor_history h
     WHERE h.record = r.n AND h.problem IS NULL
       AND h.row_hash = {{.schema}}.audit_anchor_hash(h.vid, h.key, h.hash, h.last_id, h.status, h.attempts,
                                                      h.problem, h.record)
       AND {{.schema}}.audit_chain_forgotten(h.key);
    GET DIAGNOSTICS v_more = ROW_COUNT;
    v_gone := v_gone + v_more;
    IF v_gone = 0 THEN
        RETURN 'retired 0';
    END IF;
    v_b := {{.schema}}.audit_buckets(v_items - v_gone);
    SELECT v.items, v.vector INTO v_items, v_vec FROM {{.schema}}.audit_anchors_vector(r.n, v_b) v;
    PERFORM {{.schema}}.audit_ledger_append({{.schema}}.audit_ledger_next(), 'retired', r.epoch, r.part, r.n, r.upto_id,
                                            v_items, v_b, v_vec);
    RETURN 'retired ' || v_gone;
END
$function$;
