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
--                  p_retention (every entry in it is older): the last hash
--                  of each of its N chains is kept in audit_anchors, where
--                  audit_verify and audit_head find it once the entries
--                  are gone.
--   emptied        the transactions running now are recorded again: one
--                  of them may hold a snapshot from before the anchors,
--                  which would see a chain without its beginning.
--   truncated N    none of those is running any more: the generation's N
--                  entries are truncated and it becomes the next to be
--                  current. An entry found there that the anchors do not
--                  cover (written by hand into that generation) is
--                  anchored first, then waited for again.
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
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtextextended('{{.schema}}.rotate_audit', 0)) THEN
        RETURN 'busy';
    END IF;
    PERFORM set_config('lock_timeout', '200ms', true);
    SELECT a.part, a.opened_at INTO v_cur, v_opened FROM audit_generations a WHERE a.current FOR UPDATE;

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
        IF g.anchored_to IS NULL THEN
            -- Sealed: no transaction that could still append here (one
            -- that read the current generation before the flip) is
            -- running, so what it holds is final.
            IF g.closed_at >= now() - p_retention THEN
                CONTINUE; -- its newest entries are not past the retention yet
            END IF;
            -- Each chain's last hash in this generation (the generations
            -- go oldest first, so an anchor only moves forward). Until the
            -- truncation a reader sees both the anchor and the entries it
            -- stands for, so the anchor it replaces (the hash the chain's
            -- first entry here links to) is kept beside it, unless it was
            -- this generation's own (anchored again).
            EXECUTE format($q$
                INSERT INTO {{.schema}}.audit_anchors AS x (key, hash)
                SELECT DISTINCT ON (e.key) e.key, e.hash FROM %1$s e ORDER BY e.key, e.id DESC
                ON CONFLICT (key) DO UPDATE
                   SET hash = excluded.hash, pruned_at = now(),
                       replaced = CASE WHEN EXISTS (SELECT 1 FROM %1$s o WHERE o.key = x.key AND o.hash = x.hash)
                                       THEN x.replaced ELSE x.hash END$q$, v_part);
            GET DIAGNOSTICS v_n = ROW_COUNT;
            EXECUTE format('SELECT coalesce(max(id), 0) FROM %s', v_part) INTO v_max;
            UPDATE audit_generations SET anchored_to = v_max, wait_for = NULL, changed_at = now()
             WHERE part = g.part;
            RETURN 'anchored ' || v_n;
        END IF;
        -- Anchored, and no snapshot from before the anchors remains. The
        -- entries are counted before the lock (readers of audit wait for
        -- it); under it only the newest id is read, from the index.
        EXECUTE format('SELECT count(*) FROM %s', v_part) INTO v_n;
        IF NOT {{.schema}}.try_lock(v_part::regclass, 'ACCESS EXCLUSIVE') THEN
            RETURN 'busy';
        END IF;
        EXECUTE format('SELECT coalesce(max(id), 0) FROM %s', v_part) INTO v_max;
        IF v_max > g.anchored_to THEN
            -- an entry written there since (by hand, naming the
            -- generation): anchored again first
            UPDATE audit_generations SET anchored_to = NULL, wait_for = '{}', changed_at = now() WHERE part = g.part;
            RETURN 'anchored 0';
        END IF;
        EXECUTE format('TRUNCATE %s', v_part);
        UPDATE audit_generations
           SET ready = true, opened_at = NULL, closed_at = NULL, anchored_to = NULL, wait_for = NULL,
               changed_at = now()
         WHERE part = g.part;
        RETURN 'truncated ' || v_n;
    END LOOP;

    -- The flip.
    IF v_opened < now() - p_span THEN
        v_next := (v_cur + 1) % 4;
        IF (SELECT a.ready FROM audit_generations a WHERE a.part = v_next) THEN
            UPDATE audit_generations SET current = false, closed_at = now(), changed_at = now() WHERE part = v_cur;
            UPDATE audit_generations SET current = true, ready = false, opened_at = now(), changed_at = now()
             WHERE part = v_next;
            RETURN 'flipped';
        END IF;
    END IF;
    RETURN CASE WHEN v_waited THEN 'waiting' ELSE 'idle' END;
END
$function$;
