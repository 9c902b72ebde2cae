-- Route policies that live in the database: operator pauses, and the index
-- behind per-scope ordering.

-- Paused routes (by tool_name) and adapters: every replica reads this table
-- every few seconds; rows of a paused target wait without consuming attempts.
CREATE TABLE {{.schema}}.pauses (
    target    text NOT NULL CHECK (target IN ('route', 'adapter')),
    name      text NOT NULL,
    paused_at timestamptz NOT NULL DEFAULT now(),
    paused_by text NOT NULL,
    reason    text NOT NULL DEFAULT '',
    PRIMARY KEY (target, name)
);

-- ordering: business_scope: a row is claimable only when no earlier row of
-- its tool and scope is still pending or in flight.
CREATE INDEX outbox_scope_order_idx ON {{.schema}}.outbox (tool_name, business_scope, seq)
    WHERE status IN ('pending', 'in_flight');
