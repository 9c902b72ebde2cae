-- The operator console filters rows by tool and by business_scope ("every
-- row of invoice-555"), in seq order for its keyset pages. Without these, a
-- filter on a terminal status and a tool, or on a scope, was a sequential
-- scan (300 ms at 10^6 rows, and growing with the table). They index the
-- intents, which the drain never rewrites, so a status change adds no entry
-- to them: they cost one index entry each at enqueue.
CREATE INDEX intents_scope_idx ON {{.schema}}.intents (business_scope, seq);
CREATE INDEX intents_tool_idx ON {{.schema}}.intents (tool_name, seq);
