-- Settled rows leave by truncation (docs/architecture.md, "Generations").
-- queue becomes a table partitioned by generation: new rows go to the
-- current one of three hot generations (queue_g1 … queue_g3, a ring);
-- once a generation is no longer current and its backlog has drained,
-- rotate_queue moves what is left in it (settled rows to queue_settled,
-- pending ones to the current generation) and, when no transaction that
-- could still see its old rows is running, truncates it: the dead row
-- versions the drain left there go with it, without a vacuum.
--
-- The old table becomes the settled partition (generation 0) as it is,
-- without a rewrite: rows pending or in flight in it at the upgrade are
-- drained there, in place, and stay there once settled. The functions,
-- triggers and views on the new table are defined in migrations/code/,
-- installed right after this migration; until then a guard trigger makes
-- every write to queue fail with 55000 and be retried, so nothing is
-- written without its audit entry.

LOCK TABLE {{.schema}}.queue IN ACCESS EXCLUSIVE MODE;

-- The old table's triggers go (the code package creates them on the new
-- parent, which gives every partition its copy).
DROP TRIGGER IF EXISTS queue_audit_insert ON {{.schema}}.queue;
DROP TRIGGER IF EXISTS queue_audit_update ON {{.schema}}.queue;
DROP TRIGGER IF EXISTS queue_compensation_succeeded ON {{.schema}}.queue;
DROP TRIGGER IF EXISTS queue_forward_failed ON {{.schema}}.queue;
DROP TRIGGER IF EXISTS queue_keep_not_before ON {{.schema}}.queue;
DROP TRIGGER IF EXISTS queue_notify ON {{.schema}}.queue;

-- Which generation new rows go to, and what each generation is waiting
-- for before it can be truncated (rotate_queue).
CREATE TABLE {{.schema}}.queue_generations (
    gen        smallint    PRIMARY KEY CHECK (gen BETWEEN 1 AND 3),
    -- new rows go here (exactly one generation is current)
    current    boolean     NOT NULL,
    -- truncated and unused since: the next one to become current
    ready      boolean     NOT NULL,
    opened_at  timestamptz,
    -- the transactions (virtual transaction ids) running once the
    -- generation was found empty: it is truncated when none of them is
    -- running any more, so no snapshot that could see its rows remains
    wait_for   text[],
    changed_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX queue_generations_current ON {{.schema}}.queue_generations (current) WHERE current;
INSERT INTO {{.schema}}.queue_generations (gen, current, ready, opened_at)
VALUES (1, true, false, now()), (2, false, true, NULL), (3, false, true, NULL);

-- The column default of queue.gen; its current definition is in
-- migrations/code/functions/queue_generation.sql.
CREATE FUNCTION {{.schema}}.queue_generation() RETURNS smallint
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO '{{.schema}}', 'pg_catalog', 'pg_temp'
AS $$ SELECT gen FROM {{.schema}}.queue_generations WHERE current $$;

-- The old table, its indexes and constraints renamed, becomes generation 0.
ALTER TABLE {{.schema}}.queue RENAME TO queue_settled;
ALTER INDEX {{.schema}}.queue_pkey RENAME TO queue_settled_pkey;
ALTER INDEX {{.schema}}.queue_due_idx RENAME TO queue_settled_due_idx;
ALTER INDEX {{.schema}}.queue_lease_idx RENAME TO queue_settled_lease_idx;
ALTER INDEX {{.schema}}.queue_status_idx RENAME TO queue_settled_status_idx;
ALTER INDEX {{.schema}}.queue_scope_order_idx RENAME TO queue_settled_scope_order_idx;
ALTER TABLE {{.schema}}.queue_settled ADD COLUMN gen smallint NOT NULL DEFAULT 0;

-- The new parent, same columns in the same order, and gen. It has no
-- primary key (a partitioned table's would have to include gen): each
-- partition keeps seq unique, and a seq is in one partition only, since
-- a queue row is inserted once per intent (intents.seq is unique) and
-- rotate_queue moves it as one delete and one insert.
CREATE TABLE {{.schema}}.queue (
    LIKE {{.schema}}.queue_settled INCLUDING DEFAULTS INCLUDING CONSTRAINTS
) PARTITION BY LIST (gen);
ALTER TABLE {{.schema}}.queue ALTER COLUMN gen SET DEFAULT {{.schema}}.queue_generation();

CREATE INDEX queue_due_idx ON {{.schema}}.queue (next_attempt_at, seq) WHERE status = 'pending';
CREATE INDEX queue_lease_idx ON {{.schema}}.queue (lease_expires_at) WHERE status = 'in_flight';
CREATE INDEX queue_status_idx ON {{.schema}}.queue (status, updated_at) WHERE status <> 'in_flight';
CREATE INDEX queue_scope_order_idx ON {{.schema}}.queue (tool_name, business_scope, seq)
    WHERE status IN ('pending', 'in_flight');

-- The old table's indexes match the parent's and are attached as they are.
ALTER TABLE {{.schema}}.queue_settled ALTER COLUMN gen DROP DEFAULT;
ALTER TABLE {{.schema}}.queue ATTACH PARTITION {{.schema}}.queue_settled FOR VALUES IN (0);

CREATE TABLE {{.schema}}.queue_g1 PARTITION OF {{.schema}}.queue FOR VALUES IN (1) WITH (fillfactor = 80);
CREATE TABLE {{.schema}}.queue_g2 PARTITION OF {{.schema}}.queue FOR VALUES IN (2) WITH (fillfactor = 80);
CREATE TABLE {{.schema}}.queue_g3 PARTITION OF {{.schema}}.queue FOR VALUES IN (3) WITH (fillfactor = 80);
ALTER TABLE {{.schema}}.queue_g1 ADD CONSTRAINT queue_g1_pkey PRIMARY KEY (seq);
ALTER TABLE {{.schema}}.queue_g2 ADD CONSTRAINT queue_g2_pkey PRIMARY KEY (seq);
ALTER TABLE {{.schema}}.queue_g3 ADD CONSTRAINT queue_g3_pkey PRIMARY KEY (seq);
-- Settled rows are only ever inserted there (and rarely changed): the
-- default fill factor.
ALTER TABLE {{.schema}}.queue_settled RESET (fillfactor);

-- Whoever could use the old table may use the new one (partitions are
-- reached through it; rotate_queue, with the owner's rights, writes them).
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT e.grantee, e.privilege_type
               FROM pg_catalog.pg_class c
              CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) e
              WHERE c.oid = '{{.schema}}.queue_settled'::regclass AND e.grantee <> c.relowner LOOP
        EXECUTE format('GRANT %s ON TABLE {{.schema}}.queue TO %s',
                       g.privilege_type, CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE g.grantee::regrole::text END);
    END LOOP;
END
$$;

-- Until the code package is installed (the next transaction of the same
-- `drainer migrate`), writes to queue fail and are retried.
CREATE FUNCTION {{.schema}}.queue_migrating() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = '55000',
        MESSAGE = 'drainer.queue: the schema is being migrated (functions not installed yet); retry';
END
$$;
CREATE TRIGGER queue_migrating BEFORE INSERT OR UPDATE OR DELETE ON {{.schema}}.queue
    FOR EACH ROW EXECUTE FUNCTION {{.schema}}.queue_migrating();
