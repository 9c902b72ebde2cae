-- Crash recovery in seconds (docs/reference.md, "Reclaim"). A row whose
-- lease expired is sent again once the lease has expired, held further only
-- by what drainer knows. One of those things is how hard the provider has
-- been pushing back on the row's tool: the longest Retry-After it answered
-- within the last max_retry_after. The answer the lost attempt got may have
-- carried one that nobody could record, and a provider that rate-limits
-- some rows is likely to have rate-limited that one too.
--
-- One row per tool and minute bucket, keeping the longest Retry-After
-- (capped at the route's max_retry_after) answered in that minute. The
-- completion that writes such an answer raises its bucket in the same
-- transaction (store.Complete); the reclaim reads the buckets of the last
-- max_retry_after (store.Reclaim); the retention pass drops older buckets
-- (store.PruneRetryAfterMarks). A bucket is a minute so that a 429 storm
-- rewrites one small row per tool per minute, not one per answer.
CREATE TABLE {{.schema}}.retry_after_marks (
    tool_name   text        NOT NULL,
    bucket      timestamptz NOT NULL,
    longest_ms  bigint      NOT NULL CHECK (longest_ms > 0),
    PRIMARY KEY (tool_name, bucket)
);
