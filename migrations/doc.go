// Package migrations holds drainer's schema as numbered, forward-only SQL files
// (embedded) and applies them with tern under an advisory lock, so any number
// of replicas may run `drainer migrate` at once.
//
// Migrations follow expand/contract: a release's daemon keeps working on the
// next release's schema. schema_meta.min_daemon_schema_version records the
// oldest schema version a daemon must know to work on the current schema.
//
// # Files
//
//	embed.go                  the embedded *.sql files
//	migrate.go                DefaultSchema, ValidateSchema, Latest, Migrate, Check
//	001_init.sql              schema_meta, outbox, runs, tombstones, backlog_snapshot;
//	                          the key functions, enqueue, result, abort_run, triggers
//	002_sagas.sql             saga state on runs, advance_saga, its triggers, the sagas view
//	003_policies.sql          pauses; the per-scope ordering index
//	004_audit.sql             the hash-chained audit trail: its triggers, audit_append,
//	                          audit_verify
//	005_retention.sql         prune_rows (to tombstones), prune_audit; vacuum settings
//	006_reliability.sql       the not_before floor and its trigger; saga wake on abort,
//	                          sweep_sagas
//	007_enqueue_counters.sql  enqueue's duplicate and mismatch counters
//	008_saga_definitions.sql  saga_lock_key and alert_tool, shared by the failure trigger
//	                          and advance_saga
//	009_definer.sql           the producer-facing functions as SECURITY DEFINER, session_role
//	010_audit_per_attempt.sql one audit entry per attempt (none at claim), the chain head
//	                          looked up inline; in-flight rows in outbox_lease_idx
//	011_enqueue_batch.sql     enqueue_batch: many intents in one INSERT, enqueue's answers;
//	                          intent_key, the key as one inlinable expression
//	012_enqueue_inline.sql    enqueue with its checks, key and hash evaluated inline
//	013_wake_gate.sql         the insert trigger notifies only while a daemon sleeps
//	014_wake_position.sql     the notification carries the first new row's claim position
//	017_failures.sql          reclaimed_lease: the expired lease a reclaimed row keeps, so
//	                          its replica's late completion can still be written
package migrations
