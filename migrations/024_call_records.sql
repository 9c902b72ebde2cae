-- The durable MCP gateway (docs/reference.md §13) answers every retry of a
-- tools/call with exactly what the first call got: the tool result as the
-- server sent it (content blocks, structuredContent, isError), which is more
-- than the row's response holds (§5: structuredContent, else the content).
--
-- One record per key, written by the completion that settles the row, in
-- its transaction (store.Complete, for rows of routes that announce their
-- settling: those served by an mcp adapter). The first record written for a
-- key stays (a late completion of an expired lease finds it and writes
-- nothing). A record is pruned with its row (prune_rows). The result is
-- json, not jsonb: kept as the server wrote it, byte for byte.
CREATE TABLE {{.schema}}.call_records (
    key         text        NOT NULL PRIMARY KEY,
    result      json        NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
