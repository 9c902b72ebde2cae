-- The audit written by the engine (docs/architecture.md, "The audit"). A
-- queue row carries the hash of the last entry of its audit chain: the
-- statement that changes the row appends the entry and moves the head in
-- the same statement, under the row's lock, so two writers cannot fork the
-- chain and nobody looks the head up in the audit table. Null until the
-- first writer after this migration sets it (the chain's head is then
-- looked up once, as before).
ALTER TABLE {{.schema}}.queue ADD COLUMN audit_head bytea;
