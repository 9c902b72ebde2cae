-- The operator console filters and searches rows by business_scope ("every
-- row of invoice-555"), in seq order for its keyset pages. Without an index
-- that is a sequential scan of the outbox (about 300 ms at 10^6 rows, and
-- growing with the table). Rows change status with non-HOT updates anyway
-- (status is indexed), so this index adds one entry per status change.
-- Expand only: older daemons never read it.
CREATE INDEX outbox_scope_idx ON {{.schema}}.outbox (business_scope, seq);
