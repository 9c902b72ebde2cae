-- The in-server replay (docs/benchmarks.md, "Reproduce"): the engine's own
-- claim (store/claim.go, claimSQL with its plan settings) and completion
-- (complete_rows, with the audit as shipped), run as a PL/pgSQL loop inside
-- the server, each in its own transaction with synchronous_commit off, so
-- that no client, round trip or engine process takes part; and the same
-- loop over the bench's minimal table (tooling/bench/ceiling.go). What one
-- backend, or two side by side, reach here bounds what the drain can reach
-- on the same machine with any client.
--
-- Into a scratch database that `drainer migrate` has set up (schema
-- drainer, nothing else in it):
--
--   psql -d DB -v rows=100000 -f tooling/bench/replay.sql
--   psql -d DB -c 'CALL replay.drain(150, NULL, NULL, NULL)' &
--   psql -d DB -c 'CALL replay.drain(150, NULL, NULL, NULL)' & wait
--   psql -d DB -c 'CALL replay.ceiling(150, NULL, NULL, NULL)' & (twice)
--
-- Each CALL prints the rows it drained, the seconds it took and the WAL
-- bytes written meanwhile (by every backend). Run replay.sql again to
-- refill both tables. replay.rotate (below) rotates the drained
-- generation out as the engine's rotator does.
\set ON_ERROR_STOP on
CREATE SCHEMA IF NOT EXISTS replay;

CREATE TABLE IF NOT EXISTS replay.ceiling_outbox (
    key             text        PRIMARY KEY,
    status          text        NOT NULL DEFAULT 'pending',
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    attempts        integer     NOT NULL DEFAULT 0,
    lease_token     uuid,
    payload         jsonb       NOT NULL
);
CREATE INDEX IF NOT EXISTS ceiling_outbox_due_idx ON replay.ceiling_outbox (next_attempt_at) WHERE status = 'pending';

-- drain claims up to p_batch due rows as the engine does, reads their
-- intents, and completes them as succeeded with a 200 answer, until no row
-- is due.
CREATE OR REPLACE PROCEDURE replay.drain(p_batch integer, INOUT rows bigint, INOUT seconds numeric, INOUT wal_bytes numeric)
LANGUAGE plpgsql AS $$
DECLARE
    v_seqs     bigint[];
    v_tokens   uuid[];
    v_attempts integer[];
    v_gens     smallint[];
    v_n        integer;
    v_start    timestamptz := clock_timestamp();
    v_lsn      pg_lsn := pg_current_wal_lsn();
BEGIN
    rows := 0;
    LOOP
        PERFORM set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
                set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true),
                set_config('plan_cache_mode', 'force_generic_plan', true), set_config('jit', 'off', true),
                set_config('synchronous_commit', 'off', true);
        WITH due AS MATERIALIZED (
            SELECT seq, gen FROM drainer.queue o
             WHERE status = 'pending' AND next_attempt_at <= now()
             ORDER BY next_attempt_at, seq
             LIMIT p_batch
             FOR UPDATE SKIP LOCKED
        ), leased AS (
            UPDATE drainer.queue o
               SET status = 'in_flight', attempts = o.attempts + 1, lease_token = gen_random_uuid(),
                   lease_expires_at = now() + interval '30 seconds', leased_by = 'replay',
                   first_attempt_at = coalesce(o.first_attempt_at, now()), updated_at = now()
              FROM due
             WHERE o.seq = due.seq AND o.gen = due.gen
            RETURNING o.seq, o.attempts, o.lease_token, o.gen
        )
        SELECT array_agg(l.seq ORDER BY l.seq), array_agg(l.lease_token ORDER BY l.seq),
               array_agg(l.attempts ORDER BY l.seq), array_agg(l.gen ORDER BY l.seq), count(i.payload)
          INTO v_seqs, v_tokens, v_attempts, v_gens, v_n
          FROM leased l JOIN drainer.intents i ON i.seq = l.seq;
        COMMIT;
        EXIT WHEN v_n = 0;
        PERFORM set_config('synchronous_commit', 'off', true), set_config('jit', 'off', true),
                set_config('drainer.answer', 'on', true), set_config('drainer.note', '', true);
        PERFORM drainer.complete_rows(v_seqs, v_tokens, array_fill('succeeded'::text, ARRAY[v_n]),
                                      array_fill(0, ARRAY[v_n]), array_fill(-1::bigint, ARRAY[v_n]),
                                      array_fill(NULL::text, ARRAY[v_n]), array_fill(NULL::text, ARRAY[v_n]),
                                      array_fill('{"ok":true}'::text, ARRAY[v_n]), array_fill(200, ARRAY[v_n]),
                                      array_fill(false, ARRAY[v_n]), v_attempts, true, v_gens);
        COMMIT;
        rows := rows + v_n;
    END LOOP;
    seconds := round(extract(epoch FROM clock_timestamp() - v_start)::numeric, 3);
    wal_bytes := pg_current_wal_lsn() - v_lsn;
END
$$;

-- ceiling runs the bench's ceiling statements (tooling/bench/ceiling.go)
-- the same way.
CREATE OR REPLACE PROCEDURE replay.ceiling(p_batch integer, INOUT rows bigint, INOUT seconds numeric, INOUT wal_bytes numeric)
LANGUAGE plpgsql AS $$
DECLARE
    v_keys   text[];
    v_tokens uuid[];
    v_n      integer;
    v_start  timestamptz := clock_timestamp();
    v_lsn    pg_lsn := pg_current_wal_lsn();
BEGIN
    rows := 0;
    LOOP
        PERFORM set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
                set_config('plan_cache_mode', 'force_generic_plan', true), set_config('synchronous_commit', 'off', true);
        WITH due AS MATERIALIZED (
            SELECT key FROM replay.ceiling_outbox
             WHERE status = 'pending' AND next_attempt_at <= now()
             ORDER BY next_attempt_at
             LIMIT p_batch
             FOR UPDATE SKIP LOCKED
        ), leased AS (
            UPDATE replay.ceiling_outbox o
               SET status = 'in_flight', attempts = o.attempts + 1, lease_token = gen_random_uuid()
              FROM due
             WHERE o.key = due.key
            RETURNING o.key, o.payload, o.attempts, o.lease_token
        )
        SELECT array_agg(key), array_agg(lease_token), count(payload) INTO v_keys, v_tokens, v_n FROM leased;
        COMMIT;
        EXIT WHEN v_n = 0;
        PERFORM set_config('synchronous_commit', 'off', true);
        UPDATE replay.ceiling_outbox o
           SET status = 'succeeded', lease_token = NULL
          FROM unnest(v_keys, v_tokens) AS u(key, token)
         WHERE o.key = u.key AND o.lease_token = u.token;
        COMMIT;
        rows := rows + v_n;
    END LOOP;
    seconds := round(extract(epoch FROM clock_timestamp() - v_start)::numeric, 3);
    wal_bytes := pg_current_wal_lsn() - v_lsn;
END
$$;

-- rotate runs the rotation of the queue's generations as the engine's
-- rotator does (drainer/rotation.go): steps of rotate_queue, each its own
-- transaction, moves of p_move rows, a pause as long as each move between
-- moves, until a step does something else. After a drain, a first
-- `SELECT drainer.rotate_queue(1, 1, interval '1 hour', 5000, 5000)`
-- closes the drained generation; claims run meanwhile (pgbench -f with the
-- claim's SELECT … FOR UPDATE SKIP LOCKED) wait for each move. Returns the
-- moves made and the longest step.
CREATE OR REPLACE PROCEDURE replay.rotate(p_move integer, INOUT moves integer, INOUT longest_ms numeric)
LANGUAGE plpgsql AS $$
DECLARE
    v_start  timestamptz;
    v_answer text;
    v_took   interval;
BEGIN
    moves := 0;
    longest_ms := 0;
    LOOP
        v_start := clock_timestamp();
        v_answer := drainer.rotate_queue(1::bigint, 1, interval '1 hour', 5000, p_move);
        COMMIT;
        v_took := clock_timestamp() - v_start;
        EXIT WHEN v_answer NOT LIKE 'moved %' OR v_answer = 'moved 0';
        moves := moves + 1;
        longest_ms := greatest(longest_ms, round(extract(epoch FROM v_took)::numeric * 1000, 1));
        PERFORM pg_sleep(extract(epoch FROM v_took));
    END LOOP;
END
$$;

-- The fill: :rows intents through enqueue_batch (1,000 per call, the
-- bench's tuples and payloads), the same count of minimal rows, then both tables
-- vacuumed and analyzed and a checkpoint, so that every run starts alike.
TRUNCATE replay.ceiling_outbox;
TRUNCATE drainer.queue, drainer.intents, drainer.keys, drainer.audit, drainer.audit_anchors;
SELECT count(*) AS intents
  FROM generate_series(0, (:rows - 1) / 1000) b,
       LATERAL drainer.enqueue_batch(
           ARRAY(SELECT 'replay-' || b FROM generate_series(1, 1000) s WHERE b * 1000 + s <= :rows),
           ARRAY(SELECT 'step-' || s FROM generate_series(1, 1000) s WHERE b * 1000 + s <= :rows),
           ARRAY(SELECT 'noop' FROM generate_series(1, 1000) s WHERE b * 1000 + s <= :rows),
           ARRAY(SELECT '' FROM generate_series(1, 1000) s WHERE b * 1000 + s <= :rows),
           ARRAY(SELECT jsonb_build_object('n', b * 1000 + s) FROM generate_series(1, 1000) s WHERE b * 1000 + s <= :rows));
INSERT INTO replay.ceiling_outbox (key, payload)
SELECT 'k' || s, jsonb_build_object('n', s) FROM generate_series(1, :rows) s;
VACUUM ANALYZE replay.ceiling_outbox;
VACUUM ANALYZE drainer.queue;
VACUUM ANALYZE drainer.intents;
VACUUM ANALYZE drainer.keys;
VACUUM ANALYZE drainer.audit;
CHECKPOINT;
