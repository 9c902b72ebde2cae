-- The operator console filters rows by tool and by business_scope ("every
-- row of invoice-555"), in seq order for its keyset pages. The existing
-- indexes serve only the pending and in-flight rows of a tool
-- (outbox_scope_order_idx), so a filter on a terminal status and a tool, or
-- on a scope, was a sequential scan of the outbox (300 ms at 10^6 rows, and
-- growing with the table). Rows change status with non-HOT updates anyway
-- (status is indexed), so each index adds one entry per status change: the
-- price of an operator's query staying fast on a large table: measured
-- with `drainer bench --quick --phases drain`, WAL per drained row went
-- from 2.6 kB to 3.0 kB, the drain rate within the run-to-run noise.
-- Expand only: older daemons never read them.
CREATE INDEX outbox_scope_idx ON {{.schema}}.outbox (business_scope, seq);
CREATE INDEX outbox_tool_idx ON {{.schema}}.outbox (tool_name, seq);
