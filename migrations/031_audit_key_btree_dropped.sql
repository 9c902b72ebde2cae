-- The audit's btree on (key, id), replaced by migration 028's hash index
-- on key, is dropped in a step of its own. Its ACCESS EXCLUSIVE lock waits
-- for every transaction that read or wrote the audit (each statement of
-- the step waits at most the migration's lock_timeout, then the step is
-- tried again), and holds no other lock meanwhile: a producer waiting on
-- it closes no cycle. A database that ran an earlier 028 dropped it there.
DROP INDEX IF EXISTS {{.schema}}.audit_key_idx;
