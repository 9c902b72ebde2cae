-- The current definition of every table of drainer's schema, as a freshly
-- migrated database holds it: each table with its columns and constraints,
-- then its owned sequences, indexes and triggers, then its partitions
-- (an index ON ONLY a partitioned table is the parent of its partitions'
-- indexes, listed with them); then the views and the other sequences;
-- every list sorted by name. The schema is drainer here; a daemon run with
-- --schema NAME has the same objects in schema NAME.
--
-- Generated from the catalogs: do not edit. TestSchemaFileEqualsTheDatabase
-- fails when this file and a freshly migrated database differ; after
-- changing the migrations, regenerate it with
--
--     make schema
--     (go test ./migrations -run TestSchemaFileEqualsTheDatabase -update)
--
-- Not applied: `drainer migrate` applies the numbered migrations
-- (migrations/0NN_*.sql), then installs migrations/code/. Functions are
-- only named here: each is defined in migrations/code/functions/, one file
-- each, as are the views (code/views/) and triggers (code/triggers/) shown
-- here as installed. Privileges are not shown (migrate grants to the roles
-- already granted, so they vary with the database).
-- Rendered by PostgreSQL 15.


-- Tables
-- ======

-- drainer.audit: table partitioned by LIST (part)
CREATE TABLE drainer.audit (
    id              bigint DEFAULT nextval('drainer.audit_entry_id'::regclass) NOT NULL,
    key             text NOT NULL,
    at              timestamp with time zone NOT NULL,
    event           text NOT NULL,
    from_status     text,
    to_status       text,
    attempts        integer,
    response_status integer,
    actor           text NOT NULL,
    reason          text,
    detail_sha256   bytea,
    prev_hash       bytea,
    hash            bytea NOT NULL,
    part            smallint DEFAULT drainer.audit_generation() NOT NULL
) PARTITION BY LIST (part);
CREATE SEQUENCE drainer.audit_entry_id AS bigint OWNED BY drainer.audit.id;
CREATE INDEX audit_key_hash_idx ON ONLY drainer.audit USING hash (key);

-- drainer.audit_p0: partition FOR VALUES IN ('0') of drainer.audit
CREATE TABLE drainer.audit_p0 PARTITION OF drainer.audit (
    CONSTRAINT audit_p0_pkey PRIMARY KEY (id)
    -- id: no default of its own (audit's applies only to rows written through it)
    -- part: no default of its own (audit's applies only to rows written through it)
) FOR VALUES IN ('0') WITH (autovacuum_vacuum_insert_scale_factor=0.05);
-- a partition of index drainer.audit_key_hash_idx
CREATE INDEX audit_p0_key_hash_idx ON drainer.audit_p0 USING hash (key);

-- drainer.audit_p1: partition FOR VALUES IN ('1') of drainer.audit
CREATE TABLE drainer.audit_p1 PARTITION OF drainer.audit (
    CONSTRAINT audit_p1_pkey PRIMARY KEY (id)
) FOR VALUES IN ('1');
-- a partition of index drainer.audit_key_hash_idx
CREATE INDEX audit_p1_key_hash_idx ON drainer.audit_p1 USING hash (key);

-- drainer.audit_p2: partition FOR VALUES IN ('2') of drainer.audit
CREATE TABLE drainer.audit_p2 PARTITION OF drainer.audit (
    CONSTRAINT audit_p2_pkey PRIMARY KEY (id)
) FOR VALUES IN ('2');
-- a partition of index drainer.audit_key_hash_idx
CREATE INDEX audit_p2_key_hash_idx ON drainer.audit_p2 USING hash (key);

-- drainer.audit_p3: partition FOR VALUES IN ('3') of drainer.audit
CREATE TABLE drainer.audit_p3 PARTITION OF drainer.audit (
    CONSTRAINT audit_p3_pkey PRIMARY KEY (id)
) FOR VALUES IN ('3');
-- a partition of index drainer.audit_key_hash_idx
CREATE INDEX audit_p3_key_hash_idx ON drainer.audit_p3 USING hash (key);

-- drainer.audit_anchor_history: table
CREATE TABLE drainer.audit_anchor_history (
    vid       bigint NOT NULL,
    key       text NOT NULL,
    hash      bytea NOT NULL,
    last_id   bigint,
    status    text,
    attempts  integer,
    problem   text,
    record    bigint,
    row_hash  bytea,
    pruned_at timestamp with time zone NOT NULL,
    CONSTRAINT audit_anchor_history_pkey PRIMARY KEY (vid)
);
CREATE INDEX audit_anchor_history_key_idx ON drainer.audit_anchor_history USING btree (key, vid);
CREATE INDEX audit_anchor_history_record_idx ON drainer.audit_anchor_history USING btree (record);

-- drainer.audit_anchors: table
CREATE TABLE drainer.audit_anchors (
    key       text NOT NULL,
    hash      bytea NOT NULL,
    pruned_at timestamp with time zone DEFAULT now() NOT NULL,
    replaced  bytea,
    vid       bigint DEFAULT nextval('drainer.audit_anchor_vid'::regclass) NOT NULL,
    last_id   bigint,
    status    text,
    attempts  integer,
    problem   text,
    record    bigint,
    row_hash  bytea,
    CONSTRAINT audit_anchors_pkey PRIMARY KEY (key)
);
CREATE INDEX audit_anchors_record_idx ON drainer.audit_anchors USING btree (record);
CREATE UNIQUE INDEX audit_anchors_vid_idx ON drainer.audit_anchors USING btree (vid);

-- drainer.audit_generations: table
CREATE TABLE drainer.audit_generations (
    part          smallint NOT NULL,
    current       boolean NOT NULL,
    ready         boolean NOT NULL,
    opened_at     timestamp with time zone,
    closed_at     timestamp with time zone,
    anchored_to   bigint,
    wait_for      text[],
    changed_at    timestamp with time zone DEFAULT now() NOT NULL,
    epoch         bigint,
    anchor_record bigint,
    CONSTRAINT audit_generations_part_check CHECK (part >= 0 AND part <= 3),
    CONSTRAINT audit_generations_pkey PRIMARY KEY (part)
);
CREATE UNIQUE INDEX audit_generations_current ON drainer.audit_generations USING btree (current) WHERE current;

-- drainer.audit_ledger: table
CREATE TABLE drainer.audit_ledger (
    n       bigint NOT NULL,
    kind    text NOT NULL,
    epoch   bigint,
    part    smallint,
    from_id bigint,
    upto_id bigint,
    items   bigint NOT NULL,
    buckets integer NOT NULL,
    digest  bytea,
    vector  bytea,
    at      timestamp with time zone NOT NULL,
    prev    bytea,
    hash    bytea NOT NULL,
    CONSTRAINT audit_ledger_kind_check CHECK (kind = ANY (ARRAY['entries'::text, 'anchors'::text, 'truncated'::text, 'retired'::text])),
    CONSTRAINT audit_ledger_pkey PRIMARY KEY (n)
);

-- drainer.audit_sweep: table
CREATE TABLE drainer.audit_sweep (
    id           boolean DEFAULT true NOT NULL,
    after_record bigint,
    CONSTRAINT audit_sweep_id_check CHECK (id),
    CONSTRAINT audit_sweep_pkey PRIMARY KEY (id)
);

-- drainer.backlog_snapshot: table
CREATE TABLE drainer.backlog_snapshot (
    id                           boolean DEFAULT true NOT NULL,
    taken_at                     timestamp with time zone NOT NULL,
    rows_by_status               jsonb NOT NULL,
    oldest_pending_age_seconds   double precision NOT NULL,
    oldest_in_flight_age_seconds double precision NOT NULL,
    cost_seconds                 double precision NOT NULL,
    stats                        jsonb DEFAULT '{}'::jsonb NOT NULL,
    CONSTRAINT backlog_snapshot_id_check CHECK (id),
    CONSTRAINT backlog_snapshot_pkey PRIMARY KEY (id)
);

-- drainer.call_records: table
CREATE TABLE drainer.call_records (
    key         text NOT NULL,
    result      json NOT NULL,
    recorded_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT call_records_pkey PRIMARY KEY (key)
);

-- drainer.intents: table
CREATE TABLE drainer.intents (
    seq            bigint GENERATED ALWAYS AS IDENTITY,
    key            text NOT NULL,
    agent_run_id   text NOT NULL,
    step_id        text NOT NULL,
    tool_name      text NOT NULL,
    business_scope text DEFAULT ''::text NOT NULL,
    kind           text DEFAULT 'forward'::text NOT NULL,
    payload        jsonb NOT NULL,
    payload_hash   bytea NOT NULL,
    forward_key    text,
    traceparent    text,
    created_at     timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT intents_key_unique UNIQUE (key),
    CONSTRAINT intents_kind_check CHECK (kind = ANY (ARRAY['forward'::text, 'compensation'::text])),
    CONSTRAINT intents_pkey PRIMARY KEY (seq)
) WITH (autovacuum_analyze_scale_factor=0.02, autovacuum_vacuum_cost_limit=2000, autovacuum_vacuum_insert_scale_factor=0.05, autovacuum_vacuum_scale_factor=0.2, autovacuum_vacuum_threshold=50);
CREATE INDEX intents_run_idx ON drainer.intents USING btree (agent_run_id, seq);
CREATE INDEX intents_scope_idx ON drainer.intents USING btree (business_scope, seq);
CREATE INDEX intents_tool_idx ON drainer.intents USING btree (tool_name, seq);

-- drainer.keys: table
CREATE TABLE drainer.keys (
    key          text NOT NULL,
    payload_hash bytea NOT NULL,
    final_status text,
    pruned_at    timestamp with time zone,
    audit_head   bytea,
    CONSTRAINT keys_pkey PRIMARY KEY (key)
);
CREATE INDEX keys_pruned_idx ON drainer.keys USING btree (pruned_at) WHERE pruned_at IS NOT NULL;

-- drainer.pauses: table
CREATE TABLE drainer.pauses (
    target    text NOT NULL,
    name      text NOT NULL,
    paused_at timestamp with time zone DEFAULT now() NOT NULL,
    paused_by text NOT NULL,
    reason    text DEFAULT ''::text NOT NULL,
    CONSTRAINT pauses_pkey PRIMARY KEY (target, name),
    CONSTRAINT pauses_target_check CHECK (target = ANY (ARRAY['route'::text, 'adapter'::text]))
);

-- drainer.queue: table partitioned by LIST (gen)
CREATE TABLE drainer.queue (
    seq              bigint NOT NULL,
    tool_name        text NOT NULL,
    business_scope   text NOT NULL,
    kind             text NOT NULL,
    status           text DEFAULT 'pending'::text NOT NULL,
    attempts         integer DEFAULT 0 NOT NULL,
    next_attempt_at  timestamp with time zone DEFAULT now() NOT NULL,
    not_before       timestamp with time zone,
    first_attempt_at timestamp with time zone,
    lease_token      uuid,
    lease_expires_at timestamp with time zone,
    leased_by        text,
    reclaimed_lease  uuid,
    last_error       text,
    last_problem     jsonb,
    response         jsonb,
    response_status  integer,
    note             text,
    cancel_cause     text,
    updated_at       timestamp with time zone DEFAULT now() NOT NULL,
    audit_head       bytea,
    gen              smallint DEFAULT drainer.queue_generation() NOT NULL,
    payload_bytes    integer,
    CONSTRAINT queue_attempts_check CHECK (attempts >= 0),
    CONSTRAINT queue_lease_check CHECK ((status = 'in_flight'::text) = (lease_token IS NOT NULL)),
    CONSTRAINT queue_status_check CHECK (status = ANY (ARRAY['pending'::text, 'in_flight'::text, 'succeeded'::text, 'failed'::text, 'outcome_unknown'::text, 'compensated'::text, 'compensation_failed'::text, 'cancelled'::text]))
) PARTITION BY LIST (gen);
CREATE INDEX queue_due_idx ON ONLY drainer.queue USING btree (next_attempt_at, seq) WHERE status = 'pending'::text;
CREATE INDEX queue_lease_idx ON ONLY drainer.queue USING btree (lease_expires_at) WHERE status = 'in_flight'::text;
CREATE INDEX queue_scope_order_idx ON ONLY drainer.queue USING btree (tool_name, business_scope, seq) WHERE status = ANY (ARRAY['pending'::text, 'in_flight'::text]);
CREATE INDEX queue_status_idx ON ONLY drainer.queue USING btree (status, updated_at) WHERE status <> 'in_flight'::text;
CREATE TRIGGER queue_audit_insert BEFORE INSERT ON drainer.queue FOR EACH ROW WHEN (new.audit_head IS NULL) EXECUTE FUNCTION drainer.audit_rows();
CREATE TRIGGER queue_audit_update BEFORE UPDATE ON drainer.queue FOR EACH ROW WHEN ((old.status IS DISTINCT FROM new.status OR old.attempts IS DISTINCT FROM new.attempts) AND NOT (old.status = 'pending'::text AND new.status = 'in_flight'::text) AND NOT new.audit_head IS DISTINCT FROM old.audit_head) EXECUTE FUNCTION drainer.audit_change();
CREATE TRIGGER queue_compensation_succeeded AFTER UPDATE OF status ON drainer.queue FOR EACH ROW WHEN (new.kind = 'compensation'::text AND new.status = 'succeeded'::text AND old.status IS DISTINCT FROM 'succeeded'::text) EXECUTE FUNCTION drainer.on_compensation_succeeded();
CREATE TRIGGER queue_forward_failed AFTER UPDATE OF status ON drainer.queue FOR EACH ROW WHEN (new.status = 'failed'::text AND old.status IS DISTINCT FROM 'failed'::text AND new.kind = 'forward'::text AND new.tool_name <> drainer.alert_tool()) EXECUTE FUNCTION drainer.on_forward_failed();
CREATE TRIGGER queue_keep_not_before BEFORE UPDATE OF next_attempt_at, not_before ON drainer.queue FOR EACH ROW WHEN (new.next_attempt_at < new.not_before) EXECUTE FUNCTION drainer.keep_not_before();
CREATE TRIGGER queue_notify AFTER INSERT ON drainer.queue REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION drainer.notify_outbox();

-- drainer.queue_g1: partition FOR VALUES IN ('1') of drainer.queue
CREATE TABLE drainer.queue_g1 PARTITION OF drainer.queue (
    CONSTRAINT queue_g1_pkey PRIMARY KEY (seq)
) FOR VALUES IN ('1') WITH (fillfactor=50);
-- a partition of index drainer.queue_lease_idx
CREATE INDEX queue_g1_lease_expires_at_idx ON drainer.queue_g1 USING btree (lease_expires_at) WHERE status = 'in_flight'::text;
-- a partition of index drainer.queue_due_idx
CREATE INDEX queue_g1_next_attempt_at_seq_idx ON drainer.queue_g1 USING btree (next_attempt_at, seq) WHERE status = 'pending'::text;
-- a partition of index drainer.queue_status_idx
CREATE INDEX queue_g1_status_updated_at_idx ON drainer.queue_g1 USING btree (status, updated_at) WHERE status <> 'in_flight'::text;
-- a partition of index drainer.queue_scope_order_idx
CREATE INDEX queue_g1_tool_name_business_scope_seq_idx ON drainer.queue_g1 USING btree (tool_name, business_scope, seq) WHERE status = ANY (ARRAY['pending'::text, 'in_flight'::text]);

-- drainer.queue_g2: partition FOR VALUES IN ('2') of drainer.queue
CREATE TABLE drainer.queue_g2 PARTITION OF drainer.queue (
    CONSTRAINT queue_g2_pkey PRIMARY KEY (seq)
) FOR VALUES IN ('2') WITH (fillfactor=50);
-- a partition of index drainer.queue_lease_idx
CREATE INDEX queue_g2_lease_expires_at_idx ON drainer.queue_g2 USING btree (lease_expires_at) WHERE status = 'in_flight'::text;
-- a partition of index drainer.queue_due_idx
CREATE INDEX queue_g2_next_attempt_at_seq_idx ON drainer.queue_g2 USING btree (next_attempt_at, seq) WHERE status = 'pending'::text;
-- a partition of index drainer.queue_status_idx
CREATE INDEX queue_g2_status_updated_at_idx ON drainer.queue_g2 USING btree (status, updated_at) WHERE status <> 'in_flight'::text;
-- a partition of index drainer.queue_scope_order_idx
CREATE INDEX queue_g2_tool_name_business_scope_seq_idx ON drainer.queue_g2 USING btree (tool_name, business_scope, seq) WHERE status = ANY (ARRAY['pending'::text, 'in_flight'::text]);

-- drainer.queue_g3: partition FOR VALUES IN ('3') of drainer.queue
CREATE TABLE drainer.queue_g3 PARTITION OF drainer.queue (
    CONSTRAINT queue_g3_pkey PRIMARY KEY (seq)
) FOR VALUES IN ('3') WITH (fillfactor=50);
-- a partition of index drainer.queue_lease_idx
CREATE INDEX queue_g3_lease_expires_at_idx ON drainer.queue_g3 USING btree (lease_expires_at) WHERE status = 'in_flight'::text;
-- a partition of index drainer.queue_due_idx
CREATE INDEX queue_g3_next_attempt_at_seq_idx ON drainer.queue_g3 USING btree (next_attempt_at, seq) WHERE status = 'pending'::text;
-- a partition of index drainer.queue_status_idx
CREATE INDEX queue_g3_status_updated_at_idx ON drainer.queue_g3 USING btree (status, updated_at) WHERE status <> 'in_flight'::text;
-- a partition of index drainer.queue_scope_order_idx
CREATE INDEX queue_g3_tool_name_business_scope_seq_idx ON drainer.queue_g3 USING btree (tool_name, business_scope, seq) WHERE status = ANY (ARRAY['pending'::text, 'in_flight'::text]);

-- drainer.queue_settled: partition FOR VALUES IN ('0') of drainer.queue
CREATE TABLE drainer.queue_settled PARTITION OF drainer.queue (
    CONSTRAINT queue_settled_pkey PRIMARY KEY (seq)
    -- gen: no default of its own (queue's applies only to rows written through it)
) FOR VALUES IN ('0');
-- a partition of index drainer.queue_due_idx
CREATE INDEX queue_settled_due_idx ON drainer.queue_settled USING btree (next_attempt_at, seq) WHERE status = 'pending'::text;
-- a partition of index drainer.queue_lease_idx
CREATE INDEX queue_settled_lease_idx ON drainer.queue_settled USING btree (lease_expires_at) WHERE status = 'in_flight'::text;
-- a partition of index drainer.queue_scope_order_idx
CREATE INDEX queue_settled_scope_order_idx ON drainer.queue_settled USING btree (tool_name, business_scope, seq) WHERE status = ANY (ARRAY['pending'::text, 'in_flight'::text]);
-- a partition of index drainer.queue_status_idx
CREATE INDEX queue_settled_status_idx ON drainer.queue_settled USING btree (status, updated_at) WHERE status <> 'in_flight'::text;

-- drainer.queue_generations: table
CREATE TABLE drainer.queue_generations (
    gen        smallint NOT NULL,
    current    boolean NOT NULL,
    ready      boolean NOT NULL,
    opened_at  timestamp with time zone,
    wait_for   text[],
    changed_at timestamp with time zone DEFAULT now() NOT NULL,
    moved_upto bigint,
    CONSTRAINT queue_generations_gen_check CHECK (gen >= 1 AND gen <= 3),
    CONSTRAINT queue_generations_pkey PRIMARY KEY (gen)
);
CREATE UNIQUE INDEX queue_generations_current ON drainer.queue_generations USING btree (current) WHERE current;

-- drainer.retry_after_marks: table
CREATE TABLE drainer.retry_after_marks (
    tool_name  text NOT NULL,
    bucket     timestamp with time zone NOT NULL,
    longest_ms bigint NOT NULL,
    CONSTRAINT retry_after_marks_longest_ms_check CHECK (longest_ms > 0),
    CONSTRAINT retry_after_marks_pkey PRIMARY KEY (tool_name, bucket)
);

-- drainer.runs: table
CREATE TABLE drainer.runs (
    agent_run_id    text NOT NULL,
    aborted_at      timestamp with time zone DEFAULT now() NOT NULL,
    abort_reason    text NOT NULL,
    aborted_by      text NOT NULL,
    saga_state      text DEFAULT 'waiting'::text NOT NULL,
    saga_note       text,
    saga_updated_at timestamp with time zone DEFAULT now() NOT NULL,
    abort_requests  integer DEFAULT 0 NOT NULL,
    rows_pruned_at  timestamp with time zone,
    CONSTRAINT runs_pkey PRIMARY KEY (agent_run_id),
    CONSTRAINT runs_saga_state_check CHECK (saga_state = ANY (ARRAY['waiting'::text, 'compensating'::text, 'halted'::text, 'done'::text]))
);
CREATE INDEX runs_active_saga_idx ON drainer.runs USING btree (agent_run_id) WHERE saga_state = ANY (ARRAY['waiting'::text, 'compensating'::text]);
CREATE INDEX runs_open_saga_idx ON drainer.runs USING btree (saga_updated_at) WHERE saga_state <> 'done'::text;

-- drainer.schema_meta: table
CREATE TABLE drainer.schema_meta (
    name  text NOT NULL,
    value text NOT NULL,
    CONSTRAINT schema_meta_pkey PRIMARY KEY (name)
);

-- drainer.schema_version: table
CREATE TABLE drainer.schema_version (
    version integer NOT NULL
);


-- Views
-- =====

-- drainer.outbox: view
CREATE VIEW drainer.outbox AS
 SELECT i.seq,
    i.key,
    i.agent_run_id,
    i.step_id,
    i.tool_name,
    i.business_scope,
    i.kind,
    i.payload,
    i.payload_hash,
    q.status,
    q.attempts,
    q.next_attempt_at,
    q.first_attempt_at,
    q.last_error,
    q.last_problem,
    q.response,
    q.response_status,
    q.lease_token,
    q.lease_expires_at,
    q.leased_by,
    i.forward_key,
    i.traceparent,
    q.note,
    q.cancel_cause,
    i.created_at,
    q.updated_at,
    q.not_before,
    q.reclaimed_lease
   FROM drainer.intents i
     JOIN drainer.queue q ON q.seq = i.seq;
CREATE TRIGGER outbox_write INSTEAD OF INSERT OR DELETE OR UPDATE ON drainer.outbox FOR EACH ROW EXECUTE FUNCTION drainer.outbox_write();

-- drainer.sagas: view
CREATE VIEW drainer.sagas AS
 SELECT r.agent_run_id,
    r.saga_state,
    r.saga_note,
    r.aborted_at,
    r.abort_reason,
    r.aborted_by,
    count(*) FILTER (WHERE o.kind = 'forward'::text AND (o.status = ANY (ARRAY['pending'::text, 'in_flight'::text]))) AS forward_open,
    count(*) FILTER (WHERE o.kind = 'forward'::text AND o.status = 'succeeded'::text) AS forward_succeeded,
    count(*) FILTER (WHERE o.kind = 'forward'::text AND o.status = 'compensated'::text) AS forward_compensated,
    count(*) FILTER (WHERE o.kind = 'forward'::text AND o.status = 'failed'::text) AS forward_failed,
    count(*) FILTER (WHERE o.kind = 'forward'::text AND o.status = 'cancelled'::text) AS forward_cancelled,
    count(*) FILTER (WHERE o.kind = 'compensation'::text AND (o.status = ANY (ARRAY['pending'::text, 'in_flight'::text]))) AS compensations_open,
    count(*) FILTER (WHERE o.kind = 'compensation'::text AND o.status = 'succeeded'::text) AS compensations_succeeded,
    count(*) FILTER (WHERE o.kind = 'compensation'::text AND o.status = 'compensation_failed'::text) AS compensations_failed,
    r.saga_updated_at
   FROM drainer.runs r
     LEFT JOIN drainer.outbox o ON o.agent_run_id = r.agent_run_id
  GROUP BY r.agent_run_id;

-- drainer.tombstones: view
CREATE VIEW drainer.tombstones AS
 SELECT k.key,
    k.payload_hash,
    k.final_status,
    k.pruned_at
   FROM drainer.keys k
  WHERE k.pruned_at IS NOT NULL;


-- Sequences owned by no column
-- ============================

CREATE SEQUENCE drainer.audit_anchor_vid AS bigint;
CREATE SEQUENCE drainer.audit_epoch AS bigint;
CREATE SEQUENCE drainer.enqueue_duplicates AS bigint;
CREATE SEQUENCE drainer.enqueue_mismatches AS bigint;


-- Functions (migrations/code/functions/<name>.sql)
-- ================================================

-- abort_run abort_run_internal advance_saga alert_tool any_running
-- audit_actor audit_anchor_generation audit_anchor_hash audit_anchors_vector
-- audit_append audit_bucket audit_buckets audit_chain_forgotten
-- audit_chain_problems audit_change audit_entries_vector audit_event
-- audit_generation audit_hash audit_head audit_horizon audit_ledger_append
-- audit_ledger_entries audit_ledger_extend audit_ledger_hash
-- audit_ledger_next audit_ledger_problems audit_problems audit_retire_anchors
-- audit_rows audit_vector_buckets audit_verify canonical_payload
-- canonical_text canonical_tuple check_tuple complete_rows
-- count_enqueue_duplicate count_enqueue_mismatch enqueue enqueue_batch
-- idempotency_key intent_key keep_not_before notify_outbox
-- on_compensation_succeeded on_forward_failed open_transactions outbox_write
-- payload_hash payload_text prune_audit prune_rows queue_generation result
-- rotate_audit rotate_queue saga_lock_key session_role sweep_sagas
-- traceparent_error try_lock
