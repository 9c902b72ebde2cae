-- rotate_queue does one step of the generations' rotation
-- (docs/architecture.md, "Generations") and says which, so that its caller
-- (drainer/rotation.go) calls it again while there is work, each step its
-- own short transaction:
--
--   moved N U      N rows (at most p_move) of a generation that is no
--                  longer current were moved out of it: settled ones to
--                  queue_settled (gen 0), pending ones to the current
--                  generation. Only once its backlog has drained (at most
--                  p_chunk rows due or in flight there); rows in flight
--                  stay until their attempt ends. The moves go through the
--                  generation in seq order, each from where the last one
--                  ended (queue_generations.moved_upto), found through
--                  the primary key: a move reads the rows it moves, not
--                  the row versions the moves before it left, so every
--                  move of a drained generation costs the same however
--                  large it was. Past the last row, the next step starts
--                  again from the first (moved 0): rows that were in
--                  flight when the moves passed them, or inserted late.
--                  U: the microseconds the move held the partition, from
--                  its lock to the move's end (its commit follows), which
--                  the caller sizes the next move by: the step's own
--                  round trip, gate and commit cost the same whatever the
--                  move's size, and counted in they would shrink every
--                  move to the least. The partition is locked
--                  EXCLUSIVE for the move, so no writer can change a row
--                  while it moves (a writer waiting for the lock reads the
--                  moved row afterwards). Every claim waits for that lock
--                  (a claim locks each generation's partition), so the
--                  caller sizes p_move to hold it briefly
--                  (drainer/rotation.go).
--   emptied        a generation was found empty: the transactions running
--                  now are recorded, since one of them may hold a snapshot
--                  from before the last move that still sees its rows
--                  there.
--   truncated      none of those transactions is running any more: the
--                  generation is truncated (its dead row versions go with
--                  it, no vacuum needed) and becomes the next to be current.
--   flipped        the next generation is ready and the current one holds
--                  p_flip_rows rows or more, or its backlog drained (at
--                  least p_idle_rows settled rows, none due or in flight),
--                  or it holds settled rows and is older than p_flip_age:
--                  new rows go to the next one from now on.
--   waiting, idle  nothing to do now (waiting: for transactions to end,
--                  or for a backlog to drain).
--   busy           another replica is rotating, or a lock was not granted
--                  within lock_timeout: try later.
--
-- A transaction that read the current generation before a flip may still
-- insert into the old one (a producer's REPEATABLE READ snapshot): the
-- truncation checks, under the partition's ACCESS EXCLUSIVE lock, that it
-- is still empty, and moves such rows first. It runs with the owner's
-- rights: the runtime role reaches the partitions only through queue.
CREATE OR REPLACE FUNCTION {{.schema}}.rotate_queue(p_flip_rows bigint, p_idle_rows integer, p_flip_age interval, p_chunk integer, p_move integer)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO '{{.schema}}', 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_cur    smallint;
    v_opened timestamptz;
    v_next   smallint;
    v_ready  boolean;
    g        record;
    v_part   text;
    v_any    boolean;
    v_active bigint;
    v_moved  bigint;
    v_rows   bigint;
    v_waited boolean := false;
    v_flip   boolean;
    v_settled bigint;
    v_from   bigint;
    v_upto   bigint;
    v_held   timestamptz;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtextextended('{{.schema}}.rotate_queue', 0)) THEN
        RETURN 'busy';
    END IF;
    PERFORM set_config('lock_timeout', '200ms', true);
    SELECT q.gen, q.opened_at INTO v_cur, v_opened FROM queue_generations q WHERE q.current FOR UPDATE;

    -- The generations that are no longer current, the oldest first.
    FOR g IN SELECT * FROM queue_generations q
              WHERE NOT q.current AND NOT q.ready
              ORDER BY (q.gen - v_cur + 2) % 3 LOOP
        v_part := format('%I.%I', '{{.schema}}', 'queue_g' || g.gen);
        -- a row left past the moves, else anywhere: each the first in
        -- the primary key's order (a scan of the table would read the
        -- moved rows' versions first)
        v_from := coalesce(g.moved_upto, 0);
        -- ((SELECT $1): a value the planner does not see; planning against
        -- it would look up the primary key's actual first entry, through
        -- the entries of every row moved and not yet vacuumed away)
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM (SELECT seq FROM %s WHERE seq > (SELECT $1::bigint) ORDER BY seq LIMIT 1) f)', v_part)
           INTO v_any USING v_from;
        IF NOT v_any AND v_from > 0 THEN
            v_from := 0;
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM (SELECT seq FROM %s ORDER BY seq LIMIT 1) f)', v_part) INTO v_any;
        END IF;
        IF v_any THEN
            -- rows still being drained there: due or in flight (a row
            -- waiting for a retry, a pause or a hold is not), counted in
            -- their partial indexes (ordered as those are: the statistics
            -- of a closed generation may still say every row is pending,
            -- and a scan of the table would then look for due rows through
            -- all of its settled ones)
            EXECUTE format($q$SELECT (SELECT count(*) FROM (SELECT 1 FROM %1$s WHERE status = 'pending' AND next_attempt_at <= now()
                                                             ORDER BY next_attempt_at, seq LIMIT %2$s) a)
                                   + (SELECT count(*) FROM (SELECT 1 FROM %1$s WHERE status = 'in_flight'
                                                             ORDER BY lease_expires_at LIMIT %2$s) b)$q$,
                           v_part, p_chunk + 1) INTO v_active;
            IF v_active > p_chunk THEN
                v_waited := true; -- its backlog is still draining there
                CONTINUE;
            END IF;
            IF NOT {{.schema}}.try_lock(v_part::regclass, 'EXCLUSIVE') THEN
                RETURN 'busy';
            END IF;
            v_held := clock_timestamp();
            EXECUTE format($q$
                WITH moved AS (
                    -- by key, as an array, from a value the planner does not
                    -- see: planned as a join, or against the value, the move
                    -- was planned by reading the primary key's first entries,
                    -- those of every row moved and not yet vacuumed away
                    -- (17 ms a move, and growing, after 500,000 rows moved)
                    DELETE FROM %1$s q
                     WHERE q.seq = ANY (ARRAY(SELECT m.seq FROM %1$s m
                                               WHERE m.seq > (SELECT $1::bigint) AND m.status <> 'in_flight'
                                               ORDER BY m.seq LIMIT %2$s))
                    RETURNING q.*
                ), ins AS (
                INSERT INTO {{.schema}}.queue (seq, tool_name, business_scope, kind, status, attempts, next_attempt_at,
                        not_before, first_attempt_at, lease_token, lease_expires_at, leased_by, reclaimed_lease,
                        last_error, last_problem, response, response_status, note, cancel_cause, updated_at,
                        audit_head, gen, payload_bytes)
                SELECT m.seq, m.tool_name, m.business_scope, m.kind, m.status, m.attempts, m.next_attempt_at,
                       m.not_before, m.first_attempt_at, m.lease_token, m.lease_expires_at, m.leased_by,
                       m.reclaimed_lease, m.last_error, m.last_problem, m.response, m.response_status, m.note,
                       m.cancel_cause, m.updated_at,
                       -- a row written before migration 019 carries no head
                       -- yet: its chain's is looked up, so that the insert
                       -- trigger appends nothing (the row only moves)
                       coalesce(m.audit_head, {{.schema}}.audit_head(i.key)),
                       CASE WHEN m.status = 'pending' THEN %3$s ELSE 0 END,
                       m.payload_bytes
                  FROM moved m
                  LEFT JOIN {{.schema}}.intents i ON i.seq = m.seq
                RETURNING 1
                )
                SELECT (SELECT count(*) FROM ins), (SELECT max(m.seq) FROM moved m)$q$, v_part, greatest(p_move, 1), v_cur)
              INTO v_moved, v_upto USING v_from;
            IF v_moved = 0 AND v_from > 0 THEN
                -- past the last row: from the first again, at the next step
                UPDATE queue_generations SET moved_upto = NULL, changed_at = now() WHERE gen = g.gen;
                RETURN 'moved 0';
            END IF;
            IF v_moved = 0 THEN
                v_waited := true; -- only rows in flight are left
                CONTINUE;
            END IF;
            UPDATE queue_generations SET wait_for = NULL, moved_upto = v_upto, changed_at = now() WHERE gen = g.gen;
            RETURN 'moved ' || v_moved || ' ' || (extract(epoch FROM clock_timestamp() - v_held) * 1000000)::bigint;
        END IF;
        IF g.wait_for IS NULL THEN
            UPDATE queue_generations q
               SET wait_for = {{.schema}}.open_transactions(),
                   changed_at = now()
             WHERE q.gen = g.gen;
            RETURN 'emptied';
        END IF;
        IF {{.schema}}.any_running(g.wait_for) THEN
            v_waited := true;
            CONTINUE;
        END IF;
        IF NOT {{.schema}}.try_lock(v_part::regclass, 'ACCESS EXCLUSIVE') THEN
            RETURN 'busy';
        END IF;
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s)', v_part) INTO v_any;
        IF v_any THEN
            -- rows inserted late (a snapshot from before the flip): moved
            -- at the next step, from the first, then waited for again
            UPDATE queue_generations SET wait_for = NULL, moved_upto = NULL, changed_at = now() WHERE gen = g.gen;
            RETURN 'moved 0';
        END IF;
        EXECUTE format('TRUNCATE %s', v_part);
        UPDATE queue_generations
           SET ready = true, wait_for = NULL, opened_at = NULL, moved_upto = NULL, changed_at = now()
         WHERE gen = g.gen;
        RETURN 'truncated';
    END LOOP;

    -- The flip.
    v_next := v_cur % 3 + 1;
    SELECT q.ready INTO v_ready FROM queue_generations q WHERE q.gen = v_next;
    IF v_ready THEN
        v_part := format('%I.%I', '{{.schema}}', 'queue_g' || v_cur);
        -- its size from the statistics (a moment late: no scan), its age
        -- from when it became current
        SELECT coalesce(s.n_live_tup + s.n_dead_tup, 0) INTO v_rows
          FROM pg_stat_user_tables s WHERE s.relid = v_part::regclass;
        v_flip := v_rows >= p_flip_rows;
        IF NOT v_flip THEN
            -- a generation is closed early only for settled rows to take
            -- away: rows that only wait (a retry, a pause) would otherwise
            -- be moved from generation to generation
            EXECUTE format($q$SELECT count(*) FROM (SELECT 1 FROM %s WHERE status NOT IN ('pending', 'in_flight') LIMIT %s) s$q$,
                           v_part, p_idle_rows) INTO v_settled;
            IF v_settled >= p_idle_rows THEN
                -- its backlog drained
                EXECUTE format($q$SELECT NOT EXISTS (SELECT 1 FROM %1$s WHERE status = 'in_flight')
                                     AND NOT EXISTS (SELECT 1 FROM %1$s WHERE status = 'pending' AND next_attempt_at <= now())$q$,
                               v_part) INTO v_flip;
            END IF;
            v_flip := v_flip OR (v_settled > 0 AND v_opened < now() - p_flip_age);
        END IF;
        IF v_flip THEN
            UPDATE queue_generations SET current = false, changed_at = now() WHERE gen = v_cur;
            UPDATE queue_generations SET current = true, ready = false, opened_at = now(), changed_at = now()
             WHERE gen = v_next;
            RETURN 'flipped';
        END IF;
    END IF;
    RETURN CASE WHEN v_waited THEN 'waiting' ELSE 'idle' END;
END
$function$;

-- The same with moves of p_chunk rows, for the replicas of releases up to
-- 25 during a rolling upgrade.
CREATE OR REPLACE FUNCTION {{.schema}}.rotate_queue(p_flip_rows bigint, p_idle_rows integer, p_flip_age interval, p_chunk integer)
 RETURNS text
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO '{{.schema}}', 'pg_catalog', 'pg_temp'
AS $function$
    SELECT {{.schema}}.rotate_queue(p_flip_rows, p_idle_rows, p_flip_age, p_chunk, p_chunk)
$function$;

-- Not PUBLIC's: code/grants.sql grants them to the roles that may update
-- the queue (deploy/sql/roles.sql grants the runtime role).
