-- Retention: terminal rows are pruned in small batches, leaving a tombstone
-- (key, payload hash, final status) so a late re-enqueue of the same tuple is
-- still answered created = false and never dispatched twice. Audit entries
-- past their retention are pruned with an anchor per chain.

CREATE INDEX tombstones_pruned_idx ON {{.schema}}.tombstones (pruned_at);

-- prune_rows moves up to p_limit rows of one terminal status, last changed
-- before p_before, to the tombstones. Rows of a run whose saga is still open
-- stay (a compensation may need them).
CREATE FUNCTION {{.schema}}.prune_rows(p_status text, p_before timestamptz, p_limit integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    n integer;
BEGIN
    IF p_status NOT IN ('succeeded', 'failed', 'compensated', 'cancelled') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('drainer.prune_rows: %s rows are never pruned automatically', p_status);
    END IF;
    WITH victims AS (
        SELECT o.seq FROM {{.schema}}.outbox o
         WHERE o.status = p_status AND o.updated_at < p_before
           AND NOT EXISTS (SELECT 1 FROM {{.schema}}.runs r
                            WHERE r.agent_run_id = o.agent_run_id AND r.saga_state <> 'done')
         ORDER BY o.updated_at
         LIMIT p_limit
         FOR UPDATE SKIP LOCKED
    ), moved AS (
        DELETE FROM {{.schema}}.outbox o USING victims v
         WHERE o.seq = v.seq AND o.status = p_status
        RETURNING o.key, o.payload_hash, o.status
    )
    INSERT INTO {{.schema}}.tombstones (key, payload_hash, final_status)
    SELECT key, payload_hash, status FROM moved
    ON CONFLICT (key) DO UPDATE SET final_status = excluded.final_status, pruned_at = now();
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- prune_audit deletes up to p_limit audit entries older than p_before,
-- oldest first, recording for each chain the hash of its last pruned entry.
CREATE FUNCTION {{.schema}}.prune_audit(p_before timestamptz, p_limit integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    n integer;
BEGIN
    WITH doomed AS (
        SELECT a.id FROM {{.schema}}.audit a
         WHERE a.at < p_before
         ORDER BY a.id
         LIMIT p_limit
         FOR UPDATE SKIP LOCKED
    ), deleted AS (
        DELETE FROM {{.schema}}.audit a USING doomed d WHERE a.id = d.id
        RETURNING a.key, a.id, a.hash
    ), last AS (
        SELECT DISTINCT ON (key) key, hash FROM deleted ORDER BY key, id DESC
    )
    INSERT INTO {{.schema}}.audit_anchors (key, hash)
    SELECT key, hash FROM last
    ON CONFLICT (key) DO UPDATE SET hash = excluded.hash, pruned_at = now();
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- The outbox is a queue: rows are updated several times and then deleted.
-- Vacuum it early and often so dead tuples do not slow the claim, and keep
-- its statistics fresh (the claim's plan is pinned anyway).
ALTER TABLE {{.schema}}.outbox SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_limit = 2000
);
ALTER TABLE {{.schema}}.audit SET (autovacuum_vacuum_insert_scale_factor = 0.05);

-- Table health and unrouted tools, computed with the backlog snapshot.
ALTER TABLE {{.schema}}.backlog_snapshot ADD COLUMN stats jsonb NOT NULL DEFAULT '{}';
