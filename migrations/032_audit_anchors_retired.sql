-- The anchors of forgotten chains leave. An anchor version stands for a
-- chain's truncated entries: the chain's next entry links to it, the
-- row's or tombstone's status is compared with it. Once the chain's key
-- has neither a row nor a tombstone and none of its entries is left, no
-- entry can link to it and nothing is compared with it, yet every anchor
-- stayed: one per key ever pruned, and `audit verify` digested them all
-- again on every run. rotate_audit now sweeps the anchors records of the
-- ledger after each truncation (audit_retire_anchors) and removes the
-- versions of forgotten chains; a ledger record of kind 'retired' states
-- by digest which versions of an anchors record are left, and is what
-- they are verified against from then on.
ALTER TABLE {{.schema}}.audit_ledger DROP CONSTRAINT audit_ledger_kind_check;
ALTER TABLE {{.schema}}.audit_ledger ADD CONSTRAINT audit_ledger_kind_check
    CHECK (kind IN ('entries', 'anchors', 'truncated', 'retired'));

-- Where the sweep is: the last anchors record it looked at (0: none yet),
-- or NULL when no sweep is under way. Each truncation starts one; so does
-- this migration, for the anchors written before it.
CREATE TABLE {{.schema}}.audit_sweep (
    id           boolean PRIMARY KEY DEFAULT true CHECK (id),
    after_record bigint
);
INSERT INTO {{.schema}}.audit_sweep (after_record) VALUES (0);
