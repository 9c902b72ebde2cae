-- audit_anchor_generation anchors generation p_part, whose entries are
-- final (rotate_audit), and returns the anchor versions it wrote:
--
-- 1. the generation's entries that no ledger record holds yet go into one;
-- 2. its chains are verified (audit_chain_problems, each chain whole: it
--    may go on in a younger generation), and so are its ledger records:
--    entries that no longer digest as they did when recorded (rewritten,
--    hashes recomputed, or removed) are a finding of the record itself
--    (key 'ledger:N'), naming the chains in the buckets that differ;
-- 3. each chain with entries here gets a new anchor version (the one it
--    had moves to audit_anchor_history): the hash and id of its last entry
--    here, the last status and attempts it recorded (its last anchor's, if
--    none here records one), and the problems found in its chain. A chain
--    whose entries here an earlier anchor already stands for gets a
--    version only for a problem not recorded yet. A broken chain is never
--    anchored clean: the problem stays in the anchor, and verify reports it
--    after the entries are gone; the rotation never stalls on it;
-- 4. the new versions are digested into an 'anchors' record of the ledger.
--
-- With p_final (rotate_audit, right before the truncation, the partition
-- locked against writes) nothing is anchored anew: what was tampered with
-- since the anchoring is recorded, and an 'anchors' record written only
-- if there was something. The caller holds the ledger's lock. Caller's
-- rights (rotate_audit's, the owner's).
CREATE OR REPLACE FUNCTION {{.schema}}.audit_anchor_generation(p_part smallint, p_final boolean)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_epoch bigint;
    v_max   bigint;
    v_n     bigint;
    v_count bigint;
    v_b     integer;
    v_items bigint;
    v_vec   bytea;
    v_keys  text[] := '{}';
    v_probs text[] := '{}';
    r       record;
BEGIN
    SELECT a.epoch INTO v_epoch FROM {{.schema}}.audit_generations a WHERE a.part = p_part;
    SELECT coalesce(max(a.id), 0) INTO v_max FROM {{.schema}}.audit a WHERE a.part = p_part;
    PERFORM {{.schema}}.audit_ledger_entries(p_part, v_epoch, v_max);

    -- The ledger's records of this generation, digested again.
    FOR r IN SELECT l.* FROM {{.schema}}.audit_ledger l
              WHERE l.kind = 'entries' AND l.epoch = v_epoch ORDER BY l.n LOOP
        SELECT v.items, v.vector INTO v_items, v_vec
          FROM {{.schema}}.audit_entries_vector(p_part, r.from_id, r.upto_id, r.buckets) v;
        IF v_vec IS DISTINCT FROM r.vector OR v_items <> r.items THEN
            SELECT v_keys || ('ledger:' || r.n),
                   v_probs || format('ledger record %s: the entries of generation %s with ids %s to %s no longer matched what it recorded, in bucket(s) %s (chains there: %s): rewritten with their hashes recomputed, or removed',
                                     r.n, r.epoch, r.from_id + 1, r.upto_id, string_agg(b.b::text, ', ' ORDER BY b.b),
                                     coalesce((SELECT string_agg(c.key, ', ' ORDER BY c.key)
                                                 FROM (SELECT DISTINCT a.key FROM {{.schema}}.audit a
                                                        WHERE a.part = p_part AND a.id > r.from_id AND a.id <= r.upto_id
                                                          AND {{.schema}}.audit_bucket(a.key, r.buckets) = ANY (array_agg(b.b))
                                                        ORDER BY a.key LIMIT 20) c), 'none left'))
              INTO v_keys, v_probs
              FROM {{.schema}}.audit_vector_buckets(r.vector, v_vec) AS b(b);
        END IF;
    END LOOP;

    v_n := {{.schema}}.audit_ledger_next();
    WITH found AS (
        SELECT c.key, c.problem || format(' (entry %s)', c.id) AS problem
          FROM {{.schema}}.audit_chain_problems(NULL, p_part) c
        UNION
        SELECT f.key, f.problem FROM unnest(v_keys, v_probs) AS f(key, problem) WHERE f.key IS NOT NULL
    ), fresh AS (
        -- each problem recorded once, by the first anchor that finds it
        SELECT f.key, string_agg(f.problem, '; ' ORDER BY f.problem) AS problem
          FROM found f
         WHERE NOT EXISTS (SELECT 1 FROM (SELECT x.problem FROM {{.schema}}.audit_anchors x WHERE x.key = f.key
                                           UNION ALL
                                           SELECT h.problem FROM {{.schema}}.audit_anchor_history h WHERE h.key = f.key) o
                            WHERE position(f.problem IN o.problem) > 0)
         GROUP BY f.key
    ), last AS (
        SELECT DISTINCT ON (a.key) a.key, a.id, a.hash
          FROM {{.schema}}.audit a WHERE a.part = p_part ORDER BY a.key, a.id DESC
    ), st AS (
        SELECT DISTINCT ON (a.key) a.key, a.to_status, a.attempts
          FROM {{.schema}}.audit a WHERE a.part = p_part AND a.to_status IS NOT NULL ORDER BY a.key, a.id DESC
    ), chains AS (
        SELECT l.key FROM last l UNION SELECT f.key FROM fresh f
    ), new AS (
        SELECT nextval('{{.schema}}.audit_anchor_vid') AS vid, k.key,
               CASE WHEN m.advance THEN l.hash ELSE coalesce(x.hash, sha256(convert_to(k.key, 'UTF8'))) END AS hash,
               CASE WHEN m.advance THEN l.id ELSE x.last_id END AS last_id,
               CASE WHEN m.advance AND s.key IS NOT NULL THEN s.to_status ELSE x.status END AS status,
               CASE WHEN m.advance AND s.key IS NOT NULL THEN s.attempts ELSE x.attempts END AS attempts,
               f.problem
          FROM chains k
          LEFT JOIN last l ON l.key = k.key
          LEFT JOIN st s ON s.key = k.key
          LEFT JOIN fresh f ON f.key = k.key
          LEFT JOIN {{.schema}}.audit_anchors x ON x.key = k.key
         CROSS JOIN LATERAL (SELECT NOT p_final AND l.key IS NOT NULL AND (x.key IS NULL OR coalesce(x.last_id, 0) < l.id) AS advance) m
         WHERE m.advance OR f.problem IS NOT NULL
    ), moved AS (
        INSERT INTO {{.schema}}.audit_anchor_history (vid, key, hash, last_id, status, attempts, problem, record, row_hash, pruned_at)
        SELECT x.vid, x.key, x.hash, x.last_id, x.status, x.attempts, x.problem, x.record, x.row_hash, x.pruned_at
          FROM {{.schema}}.audit_anchors x JOIN new n ON n.key = x.key
    )
    INSERT INTO {{.schema}}.audit_anchors AS x (key, hash, pruned_at, vid, last_id, status, attempts, problem, record, row_hash)
    SELECT n.key, n.hash, now(), n.vid, n.last_id, n.status, n.attempts, n.problem, v_n,
           {{.schema}}.audit_anchor_hash(n.vid, n.key, n.hash, n.last_id, n.status, n.attempts, n.problem, v_n)
      FROM new n
    ON CONFLICT (key) DO UPDATE
       SET hash = excluded.hash, pruned_at = excluded.pruned_at, replaced = NULL, vid = excluded.vid,
           last_id = excluded.last_id, status = excluded.status, attempts = excluded.attempts,
           problem = excluded.problem, record = excluded.record, row_hash = excluded.row_hash;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF p_final AND v_count = 0 THEN
        RETURN 0;
    END IF;

    v_b := {{.schema}}.audit_buckets(v_count);
    SELECT v.items, v.vector INTO v_items, v_vec FROM {{.schema}}.audit_anchors_vector(v_n, v_b) v;
    PERFORM {{.schema}}.audit_ledger_append(v_n, 'anchors', v_epoch, p_part, NULL, v_max, v_items, v_b, v_vec);
    IF NOT p_final THEN
        UPDATE {{.schema}}.audit_generations
           SET anchored_to = v_max, anchor_record = v_n, wait_for = NULL, changed_at = now()
         WHERE part = p_part;
    END IF;
    RETURN v_count;
END
$function$;
