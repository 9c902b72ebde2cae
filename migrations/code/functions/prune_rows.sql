-- prune_rows moves up to p_limit rows of one terminal status, last
-- changed before p_before, to the tombstones (their keys stay in the key
-- space, marked pruned, with the status and the audit head they ended
-- with: audit_problems holds the chain to them). Rows of a run whose saga is still open stay, and so
-- does a succeeded forward row of a tool in p_comp_tools (a tool whose route
-- names a compensation) until its run's saga has settled or
-- p_windows_ms[i] (the route's compensation_window) has passed since it
-- succeeded: its run can still be aborted and need it undone. Pruning a
-- run's rows stamps the run's rows_pruned_at, so its abort outlives their
-- tombstones. A pruned row's call record (call_records) is deleted with it.
--
-- A pass costs what it prunes, not what is left to prune: the rows are
-- taken in the order of the status index (status, updated_at), each
-- generation's walked in step, and the walk stops at p_limit; each is then
-- deleted by its primary key in its generation. The plan settings pin
-- that shape, whatever the statistics say: a generation's are taken while
-- its rows are pending, and a plan made from them sorted every prunable
-- row for each pass and looked each victim up by scanning the status
-- index, so pruning 1,000 of 97,000 succeeded rows took 15-21 s, and a
-- backlog of them hours (TestPruneReadsWhatItPrunes).
CREATE OR REPLACE FUNCTION {{.schema}}.prune_rows(p_status text, p_before timestamp with time zone, p_limit integer, p_comp_tools text[], p_windows_ms bigint[])
 RETURNS integer
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
 SET enable_sort TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
 SET enable_material TO 'off'
 SET jit TO 'off'
AS $function$
DECLARE
    n integer;
BEGIN
    IF p_status NOT IN ('succeeded', 'failed', 'compensated', 'cancelled') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('drainer.prune_rows: %s rows are never pruned automatically', p_status);
    END IF;
    WITH victims AS (
        SELECT o.seq, o.gen FROM {{.schema}}.queue o
          JOIN {{.schema}}.intents i ON i.seq = o.seq
          LEFT JOIN {{.schema}}.runs r ON r.agent_run_id = i.agent_run_id
          LEFT JOIN unnest(p_comp_tools, p_windows_ms) AS w(tool, ms)
                 ON p_status = 'succeeded' AND o.kind = 'forward' AND w.tool = o.tool_name
         WHERE o.status = p_status AND o.updated_at < p_before
           AND (r.agent_run_id IS NULL OR r.saga_state = 'done')
           AND (w.tool IS NULL OR r.saga_state = 'done'
                OR o.updated_at < now() - w.ms * interval '1 millisecond')
         ORDER BY o.updated_at
         LIMIT p_limit
         FOR UPDATE OF o SKIP LOCKED
    ), dequeued AS (
        -- locked above in p_status: nobody changes them before the commit
        DELETE FROM {{.schema}}.queue q USING victims v
         WHERE q.seq = v.seq AND q.gen = v.gen
        RETURNING q.seq, q.status, q.audit_head
    ), moved AS (
        DELETE FROM {{.schema}}.intents i USING dequeued d
         WHERE i.seq = d.seq
        RETURNING i.key, i.payload_hash, d.status, d.audit_head, i.agent_run_id
    ), forgotten AS (
        -- The gateway's record of the call goes with its row.
        DELETE FROM {{.schema}}.call_records c USING moved m WHERE c.key = m.key
    ), stamped AS (
        UPDATE {{.schema}}.runs r SET rows_pruned_at = now()
         WHERE r.agent_run_id IN (SELECT m.agent_run_id FROM moved m)
    )
    INSERT INTO {{.schema}}.keys AS k (key, payload_hash, final_status, audit_head, pruned_at)
    SELECT m.key, m.payload_hash, m.status, m.audit_head, now() FROM moved m
    ON CONFLICT (key) DO UPDATE SET final_status = excluded.final_status, audit_head = excluded.audit_head,
                                    pruned_at = excluded.pruned_at;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$function$;

-- The form daemons of release 14 call: no compensable tools known.
CREATE OR REPLACE FUNCTION {{.schema}}.prune_rows(p_status text, p_before timestamp with time zone, p_limit integer)
 RETURNS integer
 LANGUAGE sql
AS $function$
    SELECT {{.schema}}.prune_rows(p_status, p_before, p_limit, '{}'::text[], '{}'::bigint[])
$function$;
