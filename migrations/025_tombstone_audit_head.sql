-- A pruned key's tombstone keeps its chain's head (docs/reference.md,
-- "Audit"), as the queue row kept it (019): prune_rows copies the row's
-- audit_head into keys.audit_head. audit_problems then reports an entry
-- added to, or removed from, the end of a pruned key's chain, which the
-- tombstone's status alone cannot tell when the forgery records the same
-- status (a forged cancel ending the chain of a row cancelled at its
-- enqueue); and the retention pass keeps such a tombstone as the evidence.
--
-- Tombstones made before this migration take the head their chain has
-- now: the end of the chain from here on is witnessed. (A tampering made
-- before it stays reported as it was: by status, or by a broken link.)
ALTER TABLE {{.schema}}.keys ADD COLUMN audit_head bytea;

UPDATE {{.schema}}.keys k
   SET audit_head = coalesce(
           (SELECT a.hash FROM {{.schema}}.audit a WHERE a.key = k.key ORDER BY a.id DESC LIMIT 1),
           (SELECT x.hash FROM {{.schema}}.audit_anchors x WHERE x.key = k.key))
 WHERE k.pruned_at IS NOT NULL;
