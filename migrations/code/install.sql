-- The current definition of every function, view and trigger of the
-- schema, one file each; `drainer migrate` installs them after the
-- numbered migrations (which keep tables and data, and the history).
-- Function bodies are checked when they run, not here, so the order of
-- the functions does not matter; views follow the functions they call,
-- triggers the functions they run.
SET LOCAL check_function_bodies = off;

{{ template "functions/abort_run.sql" . }}
{{ template "functions/abort_run_internal.sql" . }}
{{ template "functions/advance_saga.sql" . }}
{{ template "functions/alert_tool.sql" . }}
{{ template "functions/any_running.sql" . }}
{{ template "functions/audit_actor.sql" . }}
{{ template "functions/audit_anchor_generation.sql" . }}
{{ template "functions/audit_anchor_hash.sql" . }}
{{ template "functions/audit_anchors_vector.sql" . }}
{{ template "functions/audit_append.sql" . }}
{{ template "functions/audit_bucket.sql" . }}
{{ template "functions/audit_buckets.sql" . }}
{{ template "functions/audit_chain_problems.sql" . }}
{{ template "functions/audit_chain_forgotten.sql" . }}
{{ template "functions/audit_change.sql" . }}
{{ template "functions/audit_entries_vector.sql" . }}
{{ template "functions/audit_event.sql" . }}
{{ template "functions/audit_generation.sql" . }}
{{ template "functions/audit_hash.sql" . }}
{{ template "functions/audit_horizon.sql" . }}
{{ template "functions/audit_ledger_append.sql" . }}
{{ template "functions/audit_ledger_entries.sql" . }}
{{ template "functions/audit_ledger_extend.sql" . }}
{{ template "functions/audit_ledger_hash.sql" . }}
{{ template "functions/audit_ledger_next.sql" . }}
{{ template "functions/audit_ledger_problems.sql" . }}
{{ template "functions/audit_problems.sql" . }}
{{ template "functions/audit_head.sql" . }}
{{ template "functions/audit_retire_anchors.sql" . }}
{{ template "functions/audit_rows.sql" . }}
{{ template "functions/audit_vector_buckets.sql" . }}
{{ template "functions/audit_verify.sql" . }}
{{ template "functions/canonical_payload.sql" . }}
{{ template "functions/canonical_text.sql" . }}
{{ template "functions/canonical_tuple.sql" . }}
{{ template "functions/check_tuple.sql" . }}
{{ template "functions/complete_rows.sql" . }}
{{ template "functions/count_enqueue_duplicate.sql" . }}
{{ template "functions/count_enqueue_mismatch.sql" . }}
{{ template "functions/enqueue.sql" . }}
{{ template "functions/enqueue_batch.sql" . }}
{{ template "functions/idempotency_key.sql" . }}
{{ template "functions/intent_key.sql" . }}
{{ template "functions/keep_not_before.sql" . }}
{{ template "functions/notify_outbox.sql" . }}
{{ template "functions/on_compensation_succeeded.sql" . }}
{{ template "functions/on_forward_failed.sql" . }}
{{ template "functions/open_transactions.sql" . }}
{{ template "functions/outbox_write.sql" . }}
{{ template "functions/payload_hash.sql" . }}
{{ template "functions/payload_text.sql" . }}
{{ template "functions/prune_audit.sql" . }}
{{ template "functions/prune_rows.sql" . }}
{{ template "functions/queue_generation.sql" . }}
{{ template "functions/result.sql" . }}
{{ template "functions/rotate_audit.sql" . }}
{{ template "functions/rotate_queue.sql" . }}
{{ template "functions/saga_lock_key.sql" . }}
{{ template "functions/session_role.sql" . }}
{{ template "functions/sweep_sagas.sql" . }}
{{ template "functions/traceparent_error.sql" . }}
{{ template "functions/try_lock.sql" . }}

{{ template "grants.sql" . }}

{{ template "views/outbox.sql" . }}
{{ template "views/sagas.sql" . }}
{{ template "views/tombstones.sql" . }}

{{ template "triggers/outbox_write.sql" . }}
{{ template "triggers/queue_audit_insert.sql" . }}
{{ template "triggers/queue_audit_update.sql" . }}
{{ template "triggers/queue_compensation_succeeded.sql" . }}
{{ template "triggers/queue_forward_failed.sql" . }}
{{ template "triggers/queue_keep_not_before.sql" . }}
{{ template "triggers/queue_notify.sql" . }}

-- Migration 020's guard, which held writes to queue until the triggers
-- above were installed.
DROP TRIGGER IF EXISTS queue_migrating ON {{.schema}}.queue;
DROP FUNCTION IF EXISTS {{.schema}}.queue_migrating();
