-- drainer: least-privilege grants for the runtime and producer roles.
--
-- Apply as the role that ran `drainer migrate` (it owns the schema), after
-- every `drainer migrate`; every statement is idempotent:
--
--   psql "$OWNER_DATABASE_URL" -v ON_ERROR_STOP=1 \
--        -v schema=drainer -v runtime_role=drainer_runtime -v producer_role=drainer_producer \
--        -f deploy/sql/roles.sql
--
-- :"schema", :"runtime_role" and :"producer_role" are psql variables (quoted
-- identifiers). docs/security.md explains each grant and shows this file
-- verbatim; integration/security_test.go applies it to fresh roles and
-- drains, operates and enqueues under them.

-- Nobody but the owner and the roles below reaches the schema.
REVOKE ALL ON SCHEMA :"schema" FROM PUBLIC;
GRANT USAGE ON SCHEMA :"schema" TO :"runtime_role", :"producer_role";

-- Runtime role: `drainer run` and the operator commands (list, inspect,
-- requeue, cancel, resolve, abort, pause, resume, audit verify). It changes
-- rows, never the schema.
GRANT SELECT ON TABLE :"schema".schema_version, :"schema".schema_meta, :"schema".sagas TO :"runtime_role";
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE :"schema".outbox, :"schema".runs, :"schema".tombstones TO :"runtime_role";
GRANT SELECT, INSERT, DELETE ON TABLE :"schema".audit, :"schema".pauses TO :"runtime_role";
-- prune_audit locks the entries it deletes (SELECT ... FOR UPDATE), which
-- needs UPDATE on one column; drainer never updates an audit entry.
GRANT UPDATE (id) ON TABLE :"schema".audit TO :"runtime_role";
GRANT SELECT, INSERT, UPDATE ON TABLE :"schema".audit_anchors, :"schema".backlog_snapshot TO :"runtime_role";
-- drainer_enqueue_duplicates_total and drainer_enqueue_mismatches_total.
GRANT SELECT ON SEQUENCE :"schema".enqueue_duplicates, :"schema".enqueue_mismatches TO :"runtime_role";

-- Producer role: agents calling drainer.enqueue, drainer.result and
-- drainer.abort_run. Those functions run with the caller's rights, so the
-- role needs the columns they touch, and no other.
-- drainer.enqueue: insert the row; read back its seq, and the payload hash
-- of an existing row or tombstone of the same key; the aborted-runs check.
GRANT INSERT (key, agent_run_id, step_id, tool_name, business_scope, kind, payload, payload_hash,
              status, cancel_cause, last_error, traceparent)
    ON TABLE :"schema".outbox TO :"producer_role";
GRANT SELECT (seq, key, payload_hash) ON TABLE :"schema".outbox TO :"producer_role";
GRANT SELECT (key, payload_hash, final_status) ON TABLE :"schema".tombstones TO :"producer_role";
GRANT SELECT (agent_run_id) ON TABLE :"schema".runs TO :"producer_role";
-- The audit trigger on the outbox runs with the rights of whoever changes a
-- row: it reads the head of the key's chain and appends an entry.
GRANT SELECT (key, id, hash), INSERT ON TABLE :"schema".audit TO :"producer_role";
GRANT SELECT (key, hash) ON TABLE :"schema".audit_anchors TO :"producer_role";
-- drainer.result.
GRANT SELECT (status, response, last_error) ON TABLE :"schema".outbox TO :"producer_role";
-- drainer.abort_run: record the abort and cancel the run's never-attempted
-- rows. The UPDATE grant is the widest of this role (see "Known gaps" in
-- docs/security.md).
GRANT INSERT (agent_run_id, abort_reason, aborted_by) ON TABLE :"schema".runs TO :"producer_role";
GRANT SELECT (agent_run_id, kind, attempts) ON TABLE :"schema".outbox TO :"producer_role";
GRANT UPDATE (status, cancel_cause, last_error, updated_at) ON TABLE :"schema".outbox TO :"producer_role";
