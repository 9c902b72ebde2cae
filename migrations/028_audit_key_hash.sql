-- The audit's per-key index becomes a hash index on key (it was a btree on
-- key and id). Every audit entry adds one entry to it, at a random place
-- (keys are hashes): a btree entry carries the whole key (41 bytes) and
-- the id, 64 bytes in all, a hash entry a 4-byte hash code, 16 bytes, so
-- each entry appended writes about 120 bytes less WAL (the drain measured
-- 1,748 bytes a row before, 1,630 after: docs/architecture.md, "Measured in
-- the server"), and the index, about half the pages (582 against 948 for
-- 100,000 entries, the btree built packed), stays in memory longer, and
-- after a checkpoint fewer of its pages are written whole. What reads it
-- asks for one key's entries (audit_head, inspect, the chain check of one
-- key); none walks keys in order. The readers that order a generation's
-- entries by key and id (the anchoring, the chain checks) sort them, as
-- they would have read most of the table through the btree anyway.
--
-- Each generation's index is built on its own, the current generation's
-- last: building takes a SHARE lock on the partition until this
-- migration commits, which blocks the appends into it (the drain's
-- completions wait meanwhile; readers do not), so the drain waits only for
-- the current generation's build (about 0.9 s per million entries on the
-- two-core build machine), not the whole audit's. The other generations
-- are written only by a transaction that read the current generation
-- before a flip. Each is attached to the new partitioned index as it is
-- built. The old index is dropped by migration 031, in a step of its own:
-- here, its ACCESS EXCLUSIVE lock, asked for while this step holds its
-- SHARE lock, deadlocked with a producer that had read the audit and
-- waited to append to it.
CREATE INDEX audit_key_hash_idx ON ONLY {{.schema}}.audit USING hash (key);
DO $$
DECLARE
    v_part smallint;
BEGIN
    FOR v_part IN SELECT s.part
                    FROM generate_series(0, 3) s(part)
                    LEFT JOIN {{.schema}}.audit_generations g ON g.part = s.part
                   ORDER BY coalesce(g.current, false), s.part LOOP
        EXECUTE format('CREATE INDEX %1$I ON {{.schema}}.%2$I USING hash (key);
                        ALTER INDEX {{.schema}}.audit_key_hash_idx ATTACH PARTITION {{.schema}}.%1$I',
                       'audit_p' || v_part || '_key_hash_idx', 'audit_p' || v_part);
    END LOOP;
END
$$;
