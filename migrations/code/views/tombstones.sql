-- tombstones: the keys whose rows were pruned (key, payload hash, final
-- status, when), kept so a late re-enqueue is still answered created =
-- false; rows of the key space (keys) marked pruned.
CREATE OR REPLACE VIEW {{.schema}}.tombstones AS
    SELECT k.key, k.payload_hash, k.final_status, k.pruned_at
      FROM {{.schema}}.keys k
     WHERE k.pruned_at IS NOT NULL;
