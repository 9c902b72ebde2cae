-- rotate_audit does one step of the audit's generations (a ring of four,
-- docs/architecture.md, "Generations") and says which, so that its caller
-- (store.Prune, the retention pass) calls it again while there is work,
-- each step its own short transaction:
--
--   sealed         a generation no longer current: the transactions running
--                  now are recorded; one of them may have read the current
--                  generation before the flip and still append there.
--   anchored N     none of those is running any more, so the generation
--                  holds its last entry, and it was closed longer ago than
--                  p_retention (every entry in it is older): it is
--                  verified and each of its N chains gets an anchor
--                  version (audit_anchor_generation: its last hash, status
--                  and attempts, and any problem found, kept for good),
--                  recorded in the ledger, where audit_verify and
--                  audit_head find it once the entries are gone. A
--                  generation anchored by release 21 (unverified) is
--                  anchored again. Also: anchors written before the
--                  ledger (migration 022) recorded in it.
--   emptied        the transactions running now are recorded again: one
--                  of them may hold a snapshot from before the anchors,
--                  which would see a chain without its beginning.
--   truncated N    none of those is running any more: the generation is
--                  verified once more (what was tampered with since the
--                  anchoring is recorded: audit_anchor_generation), its N
--                  entries are truncated and it becomes the next to be
--                  current, and the ledger records the truncation (its
--                  records' vectors go: their entries cannot be digested
--                  again). An entry found there that the anchors do not
--                  cover (written by hand into that generation) is
--                  anchored first, then waited for again.
--   retired N      the sweep that each truncation starts (audit_sweep):
--                  the next anchors record of the ledger loses the N
--                  versions of chains forgotten since (no row, no
--                  tombstone, no entry left: audit_retire_anchors), and
--                  a 'retired' record says what is left of it.
--   flipped        the current generation is older than p_span and the
--                  next one is ready: entries go there from now on.
--   waiting, idle  nothing to do now (waiting: for transactions to end).
--   busy           another replica is rotating, or a lock was not granted
--                  within lock_timeout: try later.
--
-- With p_span = p_retention / 3 an entry is kept between p_retention and
-- 4/3 of it; a generation that is not ready when its turn comes (a longer
-- retention since, say) is not flipped to: the current one grows instead.
-- It runs with the owner's rights: the runtime role cannot truncate.
CREATE OR REPLACE FUNCTION {{.schema}}.rotate_audit(p_retention interval, p_span interval)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO '{{.schema}}', 'pg_catalog', 'pg_temp'
 SET jit TO 'off'
AS $function$
DECLARE
    v_cur    smallint;
    v_opened timestamptz;
    v_next   smallint;
    g        record;
    v_part   text;
    v_max    bigint;
    v_n      bigint;
    v_waited boolean := false;
    v_older  boolean := false;
    v_rec    bigint;
    v_more   bigint;
    v_b      integer;
    v_items  bigint;
    v_vec    bytea;
    v_after  bigint;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtextextended('{{.schema}}.rotate_audit', 0)) THEN
        RETURN 'busy';
    END IF;
    PERFORM set_config('lock_timeout', '200ms', true);
    SELECT a.part, a.opened_at INTO v_cur, v_opened FROM audit_generations a WHERE a.current FOR UPDATE;

    -- Anchors written before the ledger (the upgrade to migration 022)
    -- go into it first, as one 'anchors' record. Release 21's kept no
    -- status: a row's takes its row's now (its tombstone's, once pruned),
    -- so that a change made with the triggers off from now on is told.
    IF EXISTS (SELECT 1 FROM audit_anchors x WHERE x.record IS NULL)
       OR EXISTS (SELECT 1 FROM audit_anchor_history h WHERE h.record IS NULL) THEN
        IF NOT pg_try_advisory_xact_lock(hashtextextended('{{.schema}}.audit_ledger', 0)) THEN
            RETURN 'busy';
        END IF;
        v_rec := {{.schema}}.audit_ledger_next();
        UPDATE audit_anchors x
           SET status = u.status, attempts = u.attempts, record = v_rec,
               row_hash = {{.schema}}.audit_anchor_hash(x.vid, x.key, x.hash, x.last_id, u.status, u.attempts, x.problem, v_rec)
          FROM (SELECT a.vid,
                       coalesce(a.status, CASE WHEN q.status = 'in_flight' THEN 'pending' ELSE q.status END, k.final_status) AS status,
                       CASE WHEN a.status IS NOT NULL THEN a.attempts
                            ELSE q.attempts - CASE WHEN q.status = 'in_flight' THEN 1 ELSE 0 END END AS attempts
                  FROM audit_anchors a
                  LEFT JOIN intents i ON i.key = a.key
                  LEFT JOIN queue q ON q.seq = i.seq
                  LEFT JOIN keys k ON k.key = a.key AND k.pruned_at IS NOT NULL AND i.key IS NULL
                 WHERE a.record IS NULL) u
         WHERE x.vid = u.vid;
        GET DIAGNOSTICS v_n = ROW_COUNT;
        UPDATE audit_anchor_history h
           SET record = v_rec,
               row_hash = {{.schema}}.audit_anchor_hash(h.vid, h.key, h.hash, h.last_id, h.status, h.attempts, h.problem, v_rec)
         WHERE h.record IS NULL;
        GET DIAGNOSTICS v_more = ROW_COUNT;
        v_n := v_n + v_more;
        v_b := {{.schema}}.audit_buckets(v_n);
        SELECT v.items, v.vector INTO v_items, v_vec FROM {{.schema}}.audit_anchors_vector(v_rec, v_b) v;
        PERFORM {{.schema}}.audit_ledger_append(v_rec, 'anchors', NULL, NULL, NULL, NULL, v_items, v_b, v_vec);
        RETURN 'anchored ' || v_n;
    END IF;

    -- The closed generations, the oldest first. Only the oldest is
    -- anchored and truncated (an anchor stands for all of a chain's
    -- entries before it); the others are only sealed meanwhile.
    FOR g IN SELECT * FROM audit_generations a
              WHERE NOT a.current AND NOT a.ready
              ORDER BY a.closed_at LOOP
        v_part := format('%I.%I', '{{.schema}}', 'audit_p' || g.part);
        IF g.wait_for IS NULL THEN
            UPDATE audit_generations a
               SET wait_for = {{.schema}}.open_transactions(),
                   changed_at = now()
             WHERE a.part = g.part;
            RETURN CASE WHEN g.anchored_to IS NULL THEN 'sealed' ELSE 'emptied' END;
        END IF;
        IF v_older THEN
            CONTINUE;
        END IF;
        v_older := true;
        IF {{.schema}}.any_running(g.wait_for) THEN
            v_waited := true;
            CONTINUE;
        END IF;
        IF g.anchored_to IS NULL OR g.anchor_record IS NULL THEN
            -- Sealed: no transaction that could still append here (one
            -- that read the current generation before the flip) is
            -- running, so what it holds is final. (Anchored by release
            -- 21, without verifying it: anchored again.)
            IF g.closed_at >= now() - p_retention THEN
                CONTINUE; -- its newest entries are not past the retention yet
            END IF;
            IF NOT pg_try_advisory_xact_lock(hashtextextended('{{.schema}}.audit_ledger', 0)) THEN
                RETURN 'busy';
            END IF;
            RETURN 'anchored ' || {{.schema}}.audit_anchor_generation(g.part, false);
        END IF;
        -- Anchored, and no snapshot from before the anchors remains. Under
        -- a SHARE lock (nobody writes there any more; readers go on) the
        -- entries are counted and verified once more: what was tampered
        -- with since the anchoring is recorded before they go. Under the
        -- ACCESS EXCLUSIVE lock that follows (readers of audit wait for
        -- it) only the truncation runs.
        IF NOT {{.schema}}.try_lock(v_part::regclass, 'SHARE') THEN
            RETURN 'busy';
        END IF;
        EXECUTE format('SELECT count(*), coalesce(max(id), 0) FROM %s', v_part) INTO v_n, v_max;
        IF v_max > g.anchored_to THEN
            -- an entry written there since (by hand, naming the
            -- generation): anchored again first
            UPDATE audit_generations SET anchored_to = NULL, anchor_record = NULL, wait_for = '{}', changed_at = now()
             WHERE part = g.part;
            RETURN 'anchored 0';
        END IF;
        IF NOT pg_try_advisory_xact_lock(hashtextextended('{{.schema}}.audit_ledger', 0)) THEN
            RETURN 'busy';
        END IF;
        PERFORM {{.schema}}.audit_anchor_generation(g.part, true);
        IF NOT {{.schema}}.try_lock(v_part::regclass, 'ACCESS EXCLUSIVE') THEN
            RETURN 'busy';
        END IF;
        UPDATE audit_ledger SET vector = NULL WHERE kind = 'entries' AND epoch = g.epoch;
        PERFORM {{.schema}}.audit_ledger_append({{.schema}}.audit_ledger_next(), 'truncated', g.epoch, g.part, NULL,
                                                g.anchored_to, v_n, 0, NULL);
        EXECUTE format('TRUNCATE %s', v_part);
        UPDATE audit_generations
           SET ready = true, opened_at = NULL, closed_at = NULL, anchored_to = NULL, wait_for = NULL,
               epoch = NULL, anchor_record = NULL, changed_at = now()
         WHERE part = g.part;
        -- the chains whose last entries went here may now be forgotten
        UPDATE audit_sweep SET after_record = 0;
        RETURN 'truncated ' || v_n;
    END LOOP;

    -- The sweep of forgotten chains' anchors, one anchors record a step.
    SELECT s.after_record INTO v_after FROM audit_sweep s;
    IF v_after IS NOT NULL THEN
        IF NOT pg_try_advisory_xact_lock(hashtextextended('{{.schema}}.audit_ledger', 0)) THEN
            RETURN 'busy';
        END IF;
        RETURN {{.schema}}.audit_retire_anchors(v_after);
    END IF;

    -- The flip.
    IF v_opened < now() - p_span THEN
        v_next := (v_cur + 1) % 4;
        IF (SELECT a.ready FROM audit_generations a WHERE a.part = v_next) THEN
            UPDATE audit_generations SET current = false, closed_at = now(), changed_at = now() WHERE part = v_cur;
            UPDATE audit_generations
               SET current = true, ready = false, opened_at = now(), changed_at = now(),
                   epoch = nextval('{{.schema}}.audit_epoch')
             WHERE part = v_next;
            RETURN 'flipped';
        END IF;
    END IF;
    RETURN CASE WHEN v_waited THEN 'waiting' ELSE 'idle' END;
END
$function$;
