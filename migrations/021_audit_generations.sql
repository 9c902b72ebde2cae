-- Audit entries leave by truncation (docs/architecture.md, "Generations").
-- audit becomes a table partitioned by generation, a ring of four
-- (audit_p0 … audit_p3): entries go to the current one; every retention.audit
-- ÷ 3 the next, empty, one becomes current, and a generation closed longer
-- ago than retention.audit (so every entry in it is older than that) is
-- truncated by rotate_audit, once the last hash of each chain in it is kept
-- in audit_anchors and no transaction that could still see its entries
-- without the anchors is running. Its dead row versions, if any, go with it.
--
-- The old table becomes generation 0 as it is, without a rewrite (adding a
-- column with a constant default is instant; attaching it scans it once,
-- under this migration's lock). Nothing else changes for a writer: the
-- columns are the same, id still comes from one sequence (the identity's,
-- now a plain sequence: PostgreSQL before 17 has no identity column on a
-- partitioned table), and part has a default, so the functions of the
-- release before keep writing entries until the code package replaces them.

LOCK TABLE {{.schema}}.audit IN ACCESS EXCLUSIVE MODE;

-- Which generation entries go to, and what a closed one waits for.
CREATE TABLE {{.schema}}.audit_generations (
    part        smallint    PRIMARY KEY CHECK (part BETWEEN 0 AND 3),
    -- entries go here (exactly one generation is current)
    current     boolean     NOT NULL,
    -- truncated and unused since: the next one to become current
    ready       boolean     NOT NULL,
    opened_at   timestamptz,
    -- when it stopped being current: every entry in it is older
    closed_at   timestamptz,
    -- the largest id whose chain's last hash is anchored (rotate_audit)
    anchored_to bigint,
    -- the transactions running once the anchors were committed: it is
    -- truncated when none of them is running any more
    wait_for    text[],
    changed_at  timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX audit_generations_current ON {{.schema}}.audit_generations (current) WHERE current;
-- The old table is generation 0, closed now; new entries go to 1.
INSERT INTO {{.schema}}.audit_generations (part, current, ready, opened_at, closed_at)
VALUES (0, false, false, NULL, now()), (1, true, false, now(), NULL), (2, false, true, NULL, NULL), (3, false, true, NULL, NULL);

-- A generation's anchors are committed before it is truncated, so for a
-- while a reader sees both a chain's anchor and the entries it stands
-- for: replaced keeps the anchor it replaced, which the chain's first
-- entry then links to (audit_problems).
ALTER TABLE {{.schema}}.audit_anchors ADD COLUMN replaced bytea;

-- The column default of audit.part; its current definition is in
-- migrations/code/functions/audit_generation.sql.
CREATE FUNCTION {{.schema}}.audit_generation() RETURNS smallint
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO '{{.schema}}', 'pg_catalog', 'pg_temp'
AS $$ SELECT part FROM {{.schema}}.audit_generations WHERE current $$;
REVOKE EXECUTE ON FUNCTION {{.schema}}.audit_generation() FROM PUBLIC;

-- id keeps its values and its sequence, as a plain one.
CREATE SEQUENCE {{.schema}}.audit_entry_id AS bigint;
SELECT setval('{{.schema}}.audit_entry_id', coalesce((SELECT max(id) FROM {{.schema}}.audit), 0) + 1, false);
ALTER TABLE {{.schema}}.audit ALTER COLUMN id DROP IDENTITY;

-- The old table, its index and key renamed, becomes generation 0.
ALTER TABLE {{.schema}}.audit RENAME TO audit_p0;
ALTER INDEX {{.schema}}.audit_pkey RENAME TO audit_p0_pkey;
ALTER INDEX {{.schema}}.audit_key_idx RENAME TO audit_p0_key_idx;
ALTER TABLE {{.schema}}.audit_p0 ADD COLUMN part smallint NOT NULL DEFAULT 0;

-- The new parent, same columns in the same order, and part. It has no
-- primary key (a partitioned table's would have to include part): ids come
-- from one sequence, and an entry is never moved.
CREATE TABLE {{.schema}}.audit (
    LIKE {{.schema}}.audit_p0 INCLUDING CONSTRAINTS
) PARTITION BY LIST (part);
ALTER TABLE {{.schema}}.audit ALTER COLUMN id SET DEFAULT nextval('{{.schema}}.audit_entry_id');
ALTER SEQUENCE {{.schema}}.audit_entry_id OWNED BY {{.schema}}.audit.id;
ALTER TABLE {{.schema}}.audit ALTER COLUMN part SET DEFAULT {{.schema}}.audit_generation();
CREATE INDEX audit_key_idx ON {{.schema}}.audit (key, id);

ALTER TABLE {{.schema}}.audit_p0 ALTER COLUMN part DROP DEFAULT;
ALTER TABLE {{.schema}}.audit ATTACH PARTITION {{.schema}}.audit_p0 FOR VALUES IN (0);
CREATE TABLE {{.schema}}.audit_p1 PARTITION OF {{.schema}}.audit FOR VALUES IN (1);
CREATE TABLE {{.schema}}.audit_p2 PARTITION OF {{.schema}}.audit FOR VALUES IN (2);
CREATE TABLE {{.schema}}.audit_p3 PARTITION OF {{.schema}}.audit FOR VALUES IN (3);
ALTER TABLE {{.schema}}.audit_p1 ADD CONSTRAINT audit_p1_pkey PRIMARY KEY (id);
ALTER TABLE {{.schema}}.audit_p2 ADD CONSTRAINT audit_p2_pkey PRIMARY KEY (id);
ALTER TABLE {{.schema}}.audit_p3 ADD CONSTRAINT audit_p3_pkey PRIMARY KEY (id);

-- Whoever could use the old table may use the new one (partitions are
-- reached through it; rotate_audit, with the owner's rights, truncates
-- them), and its sequence where they may insert.
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT e.grantee, e.privilege_type
               FROM pg_catalog.pg_class c
              CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) e
              WHERE c.oid = '{{.schema}}.audit_p0'::regclass AND e.grantee <> c.relowner LOOP
        EXECUTE format('GRANT %s ON TABLE {{.schema}}.audit TO %s',
                       g.privilege_type, CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE g.grantee::regrole::text END);
        IF g.privilege_type = 'INSERT' THEN
            EXECUTE format('GRANT USAGE ON SEQUENCE {{.schema}}.audit_entry_id TO %s',
                           CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE g.grantee::regrole::text END);
        END IF;
    END LOOP;
    -- Column privileges (the runtime role's UPDATE (id), which lets
    -- prune_audit lock the entries it deletes).
    FOR g IN SELECT DISTINCT e.grantee, e.privilege_type, a.attname
               FROM pg_catalog.pg_attribute a
              CROSS JOIN LATERAL pg_catalog.aclexplode(a.attacl) e
              WHERE a.attrelid = '{{.schema}}.audit_p0'::regclass AND a.attacl IS NOT NULL LOOP
        EXECUTE format('GRANT %s (%I) ON TABLE {{.schema}}.audit TO %s', g.privilege_type, g.attname,
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE g.grantee::regrole::text END);
    END LOOP;
END
$$;
