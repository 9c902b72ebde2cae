-- The narrow hot queue (docs/architecture.md). The outbox table becomes
-- two: intents, what a producer wrote, written once at enqueue and never
-- rewritten (the old table, renamed, keeps its rows in place), and queue, a
-- narrow row per intent that claims, completions, reclaims and operator
-- actions rewrite. drainer.outbox becomes a view joining them with the
-- columns it always had, so every reader, and every writer of release 16
-- (through INSTEAD OF triggers), keeps working on this schema.
--
-- The functions and triggers on the new tables are defined in
-- migrations/code/, installed right after this migration.

LOCK TABLE {{.schema}}.outbox IN ACCESS EXCLUSIVE MODE;

-- Whoever could use the outbox may use its view and the tables behind it.
CREATE TEMPORARY TABLE drainer_017_grants ON COMMIT DROP AS
SELECT e.grantee, e.privilege_type
  FROM pg_catalog.pg_class c
 CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) e
 WHERE c.oid = '{{.schema}}.outbox'::regclass AND e.grantee <> c.relowner;

-- The view over the old table goes; the code package defines it anew.
DROP VIEW IF EXISTS {{.schema}}.sagas;

DROP TRIGGER IF EXISTS outbox_audit_insert ON {{.schema}}.outbox;
DROP TRIGGER IF EXISTS outbox_audit_update ON {{.schema}}.outbox;
DROP TRIGGER IF EXISTS outbox_compensation_succeeded ON {{.schema}}.outbox;
DROP TRIGGER IF EXISTS outbox_forward_failed ON {{.schema}}.outbox;
DROP TRIGGER IF EXISTS outbox_keep_not_before ON {{.schema}}.outbox;
DROP TRIGGER IF EXISTS outbox_notify ON {{.schema}}.outbox;

CREATE TABLE {{.schema}}.queue (
    seq              bigint      PRIMARY KEY,
    -- copies of the intent's, never changed: the claim skips paused and
    -- unrouted tools and keeps per-scope order without reading intents,
    -- and the saga triggers' conditions read the kind
    tool_name        text        NOT NULL,
    business_scope   text        NOT NULL,
    kind             text        NOT NULL,
    status           text        NOT NULL DEFAULT 'pending',
    attempts         integer     NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    not_before       timestamptz,
    first_attempt_at timestamptz,
    lease_token      uuid,
    lease_expires_at timestamptz,
    leased_by        text,
    reclaimed_lease  uuid,
    -- the outcome: null until an attempt writes it
    last_error       text,
    last_problem     jsonb,
    response         jsonb,
    response_status  integer,
    note             text,
    cancel_cause     text,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT queue_status_check CHECK (status IN ('pending', 'in_flight', 'succeeded', 'failed',
        'outcome_unknown', 'compensated', 'compensation_failed', 'cancelled')),
    CONSTRAINT queue_lease_check CHECK ((status = 'in_flight') = (lease_token IS NOT NULL)),
    CONSTRAINT queue_attempts_check CHECK (attempts >= 0)
) WITH (fillfactor = 80);

INSERT INTO {{.schema}}.queue (seq, tool_name, business_scope, kind, status, attempts, next_attempt_at,
        not_before, first_attempt_at, lease_token, lease_expires_at, leased_by, reclaimed_lease,
        last_error, last_problem, response, response_status, note, cancel_cause, updated_at)
SELECT seq, tool_name, business_scope, kind, status, attempts, next_attempt_at,
       not_before, first_attempt_at, lease_token, lease_expires_at, leased_by, reclaimed_lease,
       last_error, last_problem, response, response_status, note, cancel_cause, updated_at
  FROM {{.schema}}.outbox
 ORDER BY seq;

CREATE INDEX queue_due_idx ON {{.schema}}.queue (next_attempt_at, seq) WHERE status = 'pending';
CREATE INDEX queue_lease_idx ON {{.schema}}.queue (lease_expires_at) WHERE status = 'in_flight';
CREATE INDEX queue_status_idx ON {{.schema}}.queue (status, updated_at) WHERE status <> 'in_flight';
CREATE INDEX queue_scope_order_idx ON {{.schema}}.queue (tool_name, business_scope, seq)
    WHERE status IN ('pending', 'in_flight');

-- The old table keeps the intent's columns and becomes intents.
ALTER TABLE {{.schema}}.outbox RENAME TO intents;
ALTER TABLE {{.schema}}.intents
    DROP COLUMN status, DROP COLUMN attempts, DROP COLUMN next_attempt_at, DROP COLUMN not_before,
    DROP COLUMN first_attempt_at, DROP COLUMN lease_token, DROP COLUMN lease_expires_at,
    DROP COLUMN leased_by, DROP COLUMN reclaimed_lease, DROP COLUMN last_error,
    DROP COLUMN last_problem, DROP COLUMN response, DROP COLUMN response_status, DROP COLUMN note,
    DROP COLUMN cancel_cause, DROP COLUMN updated_at;
ALTER TABLE {{.schema}}.intents RENAME CONSTRAINT outbox_pkey TO intents_pkey;
ALTER TABLE {{.schema}}.intents RENAME CONSTRAINT outbox_key_unique TO intents_key_unique;
ALTER TABLE {{.schema}}.intents RENAME CONSTRAINT outbox_kind_check TO intents_kind_check;
ALTER INDEX {{.schema}}.outbox_run_idx RENAME TO intents_run_idx;
ALTER SEQUENCE {{.schema}}.outbox_seq_seq RENAME TO intents_seq_seq;
ALTER TABLE {{.schema}}.intents SET (autovacuum_vacuum_scale_factor = 0.2, autovacuum_vacuum_threshold = 50);

-- The view every reader knows, in the old table's column order.
CREATE VIEW {{.schema}}.outbox AS
SELECT i.seq, i.key, i.agent_run_id, i.step_id, i.tool_name, i.business_scope, i.kind,
       i.payload, i.payload_hash, q.status, q.attempts, q.next_attempt_at, q.first_attempt_at,
       q.last_error, q.last_problem, q.response, q.response_status, q.lease_token,
       q.lease_expires_at, q.leased_by, i.forward_key, i.traceparent, q.note, q.cancel_cause,
       i.created_at, q.updated_at, q.not_before, q.reclaimed_lease
  FROM {{.schema}}.intents i
  JOIN {{.schema}}.queue q ON q.seq = i.seq;

CREATE FUNCTION {{.schema}}.outbox_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = '55000',
        MESSAGE = 'drainer.outbox: the schema is being migrated (functions not installed yet); retry';
END
$$;
CREATE TRIGGER outbox_write INSTEAD OF INSERT OR UPDATE OR DELETE ON {{.schema}}.outbox
    FOR EACH ROW EXECUTE FUNCTION {{.schema}}.outbox_write();

DO $$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT * FROM drainer_017_grants LOOP
        EXECUTE format('GRANT %s ON TABLE {{.schema}}.outbox, {{.schema}}.intents, {{.schema}}.queue TO %s',
                       g.privilege_type, CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE g.grantee::regrole::text END);
    END LOOP;
END
$$;

-- Between this commit and the code package's install (the next transaction
-- of the same `drainer migrate`), queue has no triggers yet and every write
-- through the view fails with 55000: nothing is written unaudited, and the
-- writer retries. A daemon of this release starts only once the code
-- package is installed (migrations.Check).
