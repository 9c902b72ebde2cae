-- The audit's anchors verified, kept and chained (docs/architecture.md,
-- "The audit's ledger").
--
-- audit_ledger is one hash chain over the whole audit: each record links to
-- the one before it and states, by digest, what the audit held: a range of
-- one generation's entries ('entries', appended by `drainer audit
-- checkpoint` and by the rotation before it anchors a generation), the
-- anchors one anchoring wrote ('anchors'), or that a generation was
-- truncated ('truncated'). A signed checkpoint names its last record, so a
-- rewrite of anything the ledger covered, hashes recomputed or not, no
-- longer extends it.
--
-- An anchor is no longer overwritten: the chain's anchor of each
-- generation is a new version, the one before moves to
-- audit_anchor_history, and every version keeps the last status and
-- attempts its chain recorded and the problems the rotation found in the
-- entries it stands for, so that verify reports them for good. audit_anchors
-- keeps one row per chain (its current anchor, which the writers read).
LOCK TABLE {{.schema}}.audit_generations, {{.schema}}.audit_anchors IN ACCESS EXCLUSIVE MODE;

CREATE TABLE {{.schema}}.audit_ledger (
    n       bigint      PRIMARY KEY,
    kind    text        NOT NULL CHECK (kind IN ('entries', 'anchors', 'truncated')),
    -- the generation (its epoch: part numbers come round again) whose
    -- entries the record covers, anchored or truncated
    epoch   bigint,
    part    smallint,
    -- 'entries': the ids in (from_id, upto_id] of the generation
    from_id bigint,
    upto_id bigint,
    items   bigint      NOT NULL,
    -- the items are hashed in buckets by key (audit_bucket): vector holds
    -- each non-empty bucket's number and digest, digest is sha256(vector).
    -- The vector of a truncated generation's records is dropped; the
    -- digest stays.
    buckets integer     NOT NULL,
    digest  bytea,
    vector  bytea,
    at      timestamptz NOT NULL,
    prev    bytea,
    hash    bytea       NOT NULL
);

-- Generations are told apart by an epoch: the part numbers of the ring
-- come round again. anchor_record is the ledger record of the generation's
-- anchors: a generation anchored by the release before (no record) is
-- anchored again, verified, before it is truncated.
CREATE SEQUENCE {{.schema}}.audit_epoch AS bigint;
ALTER TABLE {{.schema}}.audit_generations ADD COLUMN epoch bigint, ADD COLUMN anchor_record bigint;
UPDATE {{.schema}}.audit_generations g SET epoch = s.n
  FROM (SELECT a.part, row_number() OVER (ORDER BY a.current, a.closed_at, a.part) AS n
          FROM {{.schema}}.audit_generations a WHERE NOT a.ready) s
 WHERE g.part = s.part;
SELECT setval('{{.schema}}.audit_epoch', coalesce((SELECT max(epoch) FROM {{.schema}}.audit_generations), 0) + 1, false);

-- Anchor versions.
CREATE SEQUENCE {{.schema}}.audit_anchor_vid AS bigint;
ALTER TABLE {{.schema}}.audit_anchors
    ADD COLUMN vid bigint,
    -- the id of the last entry the anchor stands for (null: before every
    -- entry there is now)
    ADD COLUMN last_id bigint,
    -- the chain's last recorded status and attempts, as of that entry
    ADD COLUMN status text,
    ADD COLUMN attempts integer,
    -- what the rotation found wrong in the entries it anchored
    ADD COLUMN problem text,
    -- the ledger record that holds it (null: written before this
    -- migration, until the rotation records it), and its hash
    ADD COLUMN record bigint,
    ADD COLUMN row_hash bytea;
CREATE TABLE {{.schema}}.audit_anchor_history (
    vid       bigint      PRIMARY KEY,
    key       text        NOT NULL,
    hash      bytea       NOT NULL,
    last_id   bigint,
    status    text,
    attempts  integer,
    problem   text,
    record    bigint,
    row_hash  bytea,
    pruned_at timestamptz NOT NULL
);
CREATE INDEX audit_anchor_history_key_idx ON {{.schema}}.audit_anchor_history (key, vid);

-- A generation that release 21 anchored and did not truncate yet: its
-- anchors stand for entries still there (last_id), and the anchor each
-- replaced becomes the version before. The rotation anchors that
-- generation again, verified.
UPDATE {{.schema}}.audit_anchors x SET last_id = e.id
  FROM {{.schema}}.audit e
 WHERE e.key = x.key AND e.hash = x.hash
   AND EXISTS (SELECT 1 FROM {{.schema}}.audit_generations g WHERE g.anchored_to IS NOT NULL AND NOT g.ready);
INSERT INTO {{.schema}}.audit_anchor_history (vid, key, hash, pruned_at)
SELECT nextval('{{.schema}}.audit_anchor_vid'), x.key, x.replaced, x.pruned_at
  FROM {{.schema}}.audit_anchors x
 WHERE x.last_id IS NOT NULL AND x.replaced IS NOT NULL
 ORDER BY x.key;
UPDATE {{.schema}}.audit_anchors SET vid = nextval('{{.schema}}.audit_anchor_vid');
ALTER TABLE {{.schema}}.audit_anchors
    ALTER COLUMN vid SET DEFAULT nextval('{{.schema}}.audit_anchor_vid'),
    ALTER COLUMN vid SET NOT NULL;
CREATE UNIQUE INDEX audit_anchors_vid_idx ON {{.schema}}.audit_anchors (vid);

-- Whoever may read the audit may read the ledger, the old anchors and the
-- generations (audit verify); only the owner's functions write them.
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT DISTINCT e.grantee
               FROM pg_catalog.pg_class c
              CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) e
              WHERE c.oid = '{{.schema}}.audit'::regclass AND e.privilege_type = 'SELECT' AND e.grantee <> c.relowner LOOP
        EXECUTE format('GRANT SELECT ON TABLE {{.schema}}.audit_ledger, {{.schema}}.audit_anchor_history, {{.schema}}.audit_generations TO %s',
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE g.grantee::regrole::text END);
    END LOOP;
END
$$;
