-- audit_ledger_problems checks the ledger (audit_ledger) and returns its
-- problems, each with the record's number as id and, where a chain is to
-- blame, its key (else 'ledger'):
--
-- - the chain: records numbered from 1 without a gap, each linking to the
--   one before it, each matching its hash (and its vector its digest);
-- - an 'entries' record of a generation still there: the entries it
--   recorded, digested again, match it; where they do not, the chains
--   with entries in the buckets that differ are named. A generation that
--   is gone must have been truncated (a 'truncated' record), or be
--   anchored and empty (its truncation underway);
-- - an 'anchors' record: the anchor versions it holds, digested again,
--   match it, or, once versions of forgotten chains left it, its latest
--   'retired' record (audit_retire_anchors); every version that names a
--   record is held by one.
--
-- A rewrite that recomputed every hash, the ledger's included, passes
-- here: a signed checkpoint catches it (`drainer audit verify
-- --checkpoints`).
CREATE OR REPLACE FUNCTION {{.schema}}.audit_ledger_problems()
 RETURNS TABLE(id bigint, key text, problem text)
 LANGUAGE plpgsql
 STABLE
 SET jit TO 'off'
AS $function$
DECLARE
    r       record;
    v_prev  bytea;
    v_last  bigint := 0;
    v_items bigint;
    v_vec   bytea;
    v_live  boolean;
    v_of    bigint;
BEGIN
    FOR r IN SELECT l.* FROM {{.schema}}.audit_ledger l ORDER BY l.n LOOP
        IF r.n <> v_last + 1 THEN
            RETURN QUERY SELECT r.n, 'ledger'::text,
                format('ledger record %s follows record %s (records were removed)', r.n, v_last);
        END IF;
        IF r.prev IS DISTINCT FROM v_prev THEN
            RETURN QUERY SELECT r.n, 'ledger'::text,
                format('ledger record %s does not link to the record before it (a record was removed, inserted or rewritten)', r.n);
        END IF;
        IF r.hash IS DISTINCT FROM {{.schema}}.audit_ledger_hash(r.prev, r.n, r.kind, r.epoch, r.part, r.from_id, r.upto_id,
                                                                 r.items, r.buckets, r.digest, r.at)
           OR (r.vector IS NOT NULL AND sha256(r.vector) IS DISTINCT FROM r.digest) THEN
            RETURN QUERY SELECT r.n, 'ledger'::text,
                format('ledger record %s does not match its hash (edited)', r.n);
        END IF;
        v_prev := r.hash;
        v_last := r.n;
        IF r.kind = 'entries' THEN
            v_live := EXISTS (SELECT 1 FROM {{.schema}}.audit_generations g
                               WHERE g.epoch = r.epoch AND g.part = r.part AND NOT g.ready);
            -- An anchored generation whose entries are gone is being
            -- truncated (a snapshot from before the truncation sees its
            -- partition empty): its anchors stand for what was verified.
            IF v_live AND NOT EXISTS (SELECT 1 FROM {{.schema}}.audit a WHERE a.part = r.part)
               AND EXISTS (SELECT 1 FROM {{.schema}}.audit_ledger t
                            WHERE t.kind = 'anchors' AND t.epoch = r.epoch AND t.n > r.n AND t.upto_id >= r.upto_id) THEN
                CONTINUE;
            END IF;
            IF v_live THEN
                SELECT v.items, v.vector INTO v_items, v_vec
                  FROM {{.schema}}.audit_entries_vector(r.part, r.from_id, r.upto_id, r.buckets) v;
                IF v_vec IS DISTINCT FROM r.vector OR v_items <> r.items THEN
                    RETURN QUERY
                    SELECT r.n, coalesce(k.key, 'ledger'),
                           format('ledger record %s: the entries of generation %s (ids %s to %s) in bucket %s no longer match what it recorded (%s)',
                                  r.n, r.epoch, r.from_id + 1, r.upto_id, b.b,
                                  CASE WHEN k.key IS NULL THEN 'removed'
                                       ELSE 'this chain''s, or another''s in the bucket, rewritten with hashes recomputed, or removed' END)
                      FROM {{.schema}}.audit_vector_buckets(r.vector, v_vec) AS b(b)
                      LEFT JOIN LATERAL (
                          SELECT DISTINCT a.key FROM {{.schema}}.audit a
                           WHERE a.part = r.part AND a.id > r.from_id AND a.id <= r.upto_id
                             AND {{.schema}}.audit_bucket(a.key, r.buckets) = b.b) k ON true;
                END IF;
            ELSIF NOT EXISTS (SELECT 1 FROM {{.schema}}.audit_ledger t
                               WHERE t.kind = 'truncated' AND t.epoch = r.epoch AND t.n > r.n) THEN
                RETURN QUERY SELECT r.n, 'ledger'::text,
                    format('ledger record %s: generation %s holds its entries no more, and was not truncated by the rotation', r.n, r.epoch);
            END IF;
        ELSIF r.kind = 'retired' AND NOT EXISTS (SELECT 1 FROM {{.schema}}.audit_ledger t
                                                  WHERE t.n = r.from_id AND t.n < r.n AND t.kind = 'anchors') THEN
            RETURN QUERY SELECT r.n, 'ledger'::text,
                format('ledger record %s retires anchors of record %s, which is no anchors record before it', r.n, r.from_id);
        ELSIF r.kind IN ('anchors', 'retired') THEN
            -- what the versions of an anchors record digest to is told by
            -- the latest record of them (a retirement's, once there is one)
            v_of := CASE WHEN r.kind = 'anchors' THEN r.n ELSE r.from_id END;
            CONTINUE WHEN EXISTS (SELECT 1 FROM {{.schema}}.audit_ledger t
                                   WHERE t.kind = 'retired' AND t.n > r.n AND t.from_id = v_of);
            SELECT v.items, v.vector INTO v_items, v_vec FROM {{.schema}}.audit_anchors_vector(v_of, r.buckets) v;
            IF v_vec IS DISTINCT FROM r.vector OR v_items <> r.items THEN
                RETURN QUERY
                SELECT r.n, coalesce(k.key, 'ledger'),
                       format('ledger record %s: the anchors it recorded in bucket %s no longer match (%s)', r.n, b.b,
                              CASE WHEN k.key IS NULL THEN 'removed' ELSE 'this chain''s or another''s in the bucket was rewritten or removed' END)
                  FROM {{.schema}}.audit_vector_buckets(r.vector, v_vec) AS b(b)
                  LEFT JOIN LATERAL (
                      SELECT DISTINCT v.key
                        FROM (SELECT x.key FROM {{.schema}}.audit_anchors x WHERE x.record = v_of
                              UNION ALL
                              SELECT h.key FROM {{.schema}}.audit_anchor_history h WHERE h.record = v_of) v
                       WHERE {{.schema}}.audit_bucket(v.key, r.buckets) = b.b) k ON true;
            END IF;
        ELSIF EXISTS (SELECT 1 FROM {{.schema}}.audit_generations g
                       WHERE g.epoch = r.epoch AND g.part = r.part AND NOT g.ready) THEN
            RETURN QUERY SELECT r.n, 'ledger'::text,
                format('ledger record %s says generation %s was truncated, but it is still there', r.n, r.epoch);
        END IF;
    END LOOP;
    -- Anchor versions that name a record the ledger does not hold (the
    -- ledger's end was cut off, or the anchor was written by hand).
    RETURN QUERY
    SELECT max(v.record), v.key, format('anchor of %s names ledger record %s, which the ledger does not hold', v.key, v.record)
      FROM (SELECT x.key, x.record FROM {{.schema}}.audit_anchors x
             UNION ALL
            SELECT h.key, h.record FROM {{.schema}}.audit_anchor_history h) v
     WHERE v.record IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM {{.schema}}.audit_ledger l WHERE l.n = v.record AND l.kind = 'anchors')
     GROUP BY v.key, v.record;
    -- Each chain's current anchor is its latest version.
    RETURN QUERY
    SELECT h.vid, h.key, format('the anchor of %s is not its latest version %s (anchors were swapped)', h.key, h.vid)
      FROM {{.schema}}.audit_anchor_history h
      JOIN {{.schema}}.audit_anchors x ON x.key = h.key
     WHERE h.vid > x.vid;
END
$function$;
