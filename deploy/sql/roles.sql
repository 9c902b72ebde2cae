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

-- After `drainer migrate`, never before: on an older schema its
-- grants would break the daemon. This stops with an error naming the order.
SELECT CASE WHEN version < 24
            THEN ('schema version ' || version || ' predates these grants: run drainer migrate first, then this file')::int
       END
  FROM :"schema".schema_version;

-- Nobody but the owner and the roles below reaches the schema.
REVOKE ALL ON SCHEMA :"schema" FROM PUBLIC;
GRANT USAGE ON SCHEMA :"schema" TO :"runtime_role", :"producer_role";

-- Runtime role: `drainer run` and the operator commands (list, inspect,
-- requeue, cancel, resolve, abort, pause, resume, audit verify, audit
-- checkpoint). It changes rows, never the schema.
GRANT SELECT ON TABLE :"schema".schema_version, :"schema".schema_meta, :"schema".sagas TO :"runtime_role";
-- outbox is the view of intents (written once) joined to queue (the rows
-- the drain rewrites); keys is the key space (every key from its enqueue
-- until its tombstone expires); tombstones is its view of the pruned keys.
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE :"schema".outbox, :"schema".intents, :"schema".queue,
    :"schema".runs, :"schema".keys, :"schema".tombstones
    TO :"runtime_role";
GRANT SELECT, INSERT, DELETE ON TABLE :"schema".pauses TO :"runtime_role";
-- The longest Retry-After each tool was answered lately, which holds the
-- rows reclaimed from a replica that died (written by the completions,
-- read by the reclaim, pruned by both's replicas).
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE :"schema".retry_after_marks TO :"runtime_role";
-- The MCP gateway's records of settled calls (written by the completions,
-- read by the gateway, deleted with their rows).
GRANT SELECT, INSERT, DELETE ON TABLE :"schema".call_records TO :"runtime_role";
-- Audit entries are written by the queue's audit triggers and by
-- audit_append, with the owner's rights: the role reads them (audit verify,
-- inspect) and prunes them (retention), and never inserts one itself.
GRANT SELECT, DELETE ON TABLE :"schema".audit TO :"runtime_role";
REVOKE INSERT ON TABLE :"schema".audit FROM :"runtime_role";
-- prune_audit locks the entries it deletes (SELECT ... FOR UPDATE), which
-- needs UPDATE on one column; drainer never updates an audit entry.
GRANT UPDATE (id) ON TABLE :"schema".audit TO :"runtime_role";
GRANT SELECT, INSERT, UPDATE ON TABLE :"schema".audit_anchors, :"schema".backlog_snapshot TO :"runtime_role";
-- The audit's ledger, its anchors' older versions and its generations:
-- audit verify (and --checkpoints) reads them; only the owner's
-- functions (rotate_audit, audit_ledger_extend) write them.
GRANT SELECT ON TABLE :"schema".audit_ledger, :"schema".audit_anchor_history, :"schema".audit_generations
    TO :"runtime_role";
-- drainer_enqueue_duplicates_total and drainer_enqueue_mismatches_total.
GRANT SELECT ON SEQUENCE :"schema".enqueue_duplicates, :"schema".enqueue_mismatches TO :"runtime_role";
-- `drainer abort` (abort_run_internal), the operator actions that change
-- no row's status (audit_append), the completions with their audit
-- entries (complete_rows), the rotation of the queue's generations
-- (rotate_queue), the generation a row inserted into the queue goes to
-- (queue_generation, queue.gen's default), the audit's rotation
-- (rotate_audit, retention) and `drainer audit checkpoint` (audit_horizon,
-- audit_ledger_extend). They run with the owner's rights.
GRANT EXECUTE ON FUNCTION :"schema".abort_run_internal(text, text, text), :"schema".audit_append(text, text, text),
    :"schema".complete_rows(bigint[], uuid[], text[], integer[], bigint[], text[], text[], text[], integer[], boolean[], integer[], boolean, smallint[]),
    :"schema".complete_rows(bigint[], uuid[], text[], integer[], bigint[], text[], text[], text[], integer[], boolean[], integer[], boolean),
    :"schema".rotate_queue(bigint, integer, interval, integer, integer),
    :"schema".rotate_queue(bigint, integer, interval, integer), :"schema".queue_generation(),
    :"schema".rotate_audit(interval, interval), :"schema".audit_horizon(), :"schema".audit_ledger_extend(bigint)
    TO :"runtime_role";
-- The producer's functions are not the runtime role's.
REVOKE EXECUTE ON FUNCTION :"schema".enqueue(text, text, text, text, jsonb, text),
    :"schema".enqueue_batch(text[], text[], text[], text[], jsonb[], text[]), :"schema".result(text),
    :"schema".abort_run(text, text) FROM :"runtime_role";

-- Producer role: agents calling drainer.enqueue (and enqueue_batch),
-- drainer.result and drainer.abort_run. They run with the owner's rights and
-- are not executable by PUBLIC: the role gets EXECUTE on them, and nothing
-- else.
GRANT EXECUTE ON FUNCTION :"schema".enqueue(text, text, text, text, jsonb, text),
    :"schema".enqueue_batch(text[], text[], text[], text[], jsonb[], text[]), :"schema".result(text),
    :"schema".abort_run(text, text) TO :"producer_role";
-- No table, sequence or other function: take back what earlier versions of
-- this file, or the upgrade to schema version 9, granted.
REVOKE ALL ON ALL TABLES IN SCHEMA :"schema" FROM :"producer_role";
REVOKE ALL ON ALL SEQUENCES IN SCHEMA :"schema" FROM :"producer_role";
REVOKE EXECUTE ON FUNCTION :"schema".abort_run_internal(text, text, text), :"schema".audit_append(text, text, text),
    :"schema".complete_rows(bigint[], uuid[], text[], integer[], bigint[], text[], text[], text[], integer[], boolean[], integer[], boolean, smallint[]),
    :"schema".complete_rows(bigint[], uuid[], text[], integer[], bigint[], text[], text[], text[], integer[], boolean[], integer[], boolean),
    :"schema".rotate_queue(bigint, integer, interval, integer, integer),
    :"schema".rotate_queue(bigint, integer, interval, integer), :"schema".queue_generation(),
    :"schema".rotate_audit(interval, interval), :"schema".audit_generation(),
    :"schema".audit_horizon(), :"schema".audit_ledger_extend(bigint)
    FROM :"producer_role";
