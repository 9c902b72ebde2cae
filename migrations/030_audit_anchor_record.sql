-- The anchor versions a ledger record holds are found by an index on
-- record (audit_anchors and audit_anchor_history). audit_anchors_vector
-- digests one record's versions: `audit verify` calls it for every
-- `anchors` record of the ledger, and each anchoring for the record it
-- writes. Without the index each call read every anchor ever written (one
-- per key ever pruned), so a verify cost records × anchors: 3 s at 109,000
-- anchors and 58 records, growing with the square of the history.
CREATE INDEX audit_anchors_record_idx ON {{.schema}}.audit_anchors (record);
CREATE INDEX audit_anchor_history_record_idx ON {{.schema}}.audit_anchor_history (record);
