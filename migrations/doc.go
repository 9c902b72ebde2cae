// Package migrations holds drainer's schema as numbered, forward-only SQL files
// (embedded) and applies them with tern under an advisory lock, so any number
// of replicas may run `drainer migrate` at once.
//
// Migrations follow expand/contract: a release's daemon keeps working on the
// next release's schema. schema_meta.min_daemon_schema_version records the
// oldest schema version a daemon must know to work on the current schema.
//
// The schema's code lives apart from its history. code/ holds the current
// definition of every function, view and trigger, one file each
// (code/functions/enqueue.sql is where drainer.enqueue is defined, and
// nowhere else counts), installed by Migrate after the numbered migrations
// as one tern code package (code/install.sql), under the migration lock,
// whenever the schema holds an older CodeRevision or other content. The
// numbered migrations keep tables, indexes, grants and data; the function
// definitions in 001-015 are history, superseded by code/. To change a
// function, edit its file and bump CodeRevision (TestCodeRevisionNamesTheFiles
// says so); a change that needs new tables or data also adds a migration.
// TestDefinitionsEqualTheFiles proves that the database holds exactly what
// the files say, and TestUpgradeTo015KeepsEveryKey that an upgraded schema
// holds what a fresh one does; TestUpgradeTo017KeepsRowsInFlight that
// release 16's daemons keep working through the move.
//
// schema.sql is the current definition of every table: its columns,
// constraints, indexes, partitions, sequences and triggers, and the views,
// as a freshly migrated database holds them, rendered from the catalogs.
// Read it, not the migrations that built a table (queue is 017, 019 and
// 020; audit 004, 005 and 021). It is not applied, and never edited by
// hand: TestSchemaFileEqualsTheDatabase fails when it and a freshly
// migrated database differ, and `make schema` (go test ./migrations -run
// TestSchemaFileEqualsTheDatabase -update) writes it again. A new
// migration changes tables, indexes, grants and data only, and comes with
// its regenerated schema.sql; functions, views and triggers stay in code/,
// one file each, where schema.sql only names the functions.
//
// # Files
//
//	embed.go                  the embedded *.sql files
//	migrate.go                DefaultSchema, ValidateSchema, Latest, Migrate, Check
//	code.go                   the code package: Code, CodeRevision, its install
//	code/                     install.sql; functions/, views/, triggers/: one file each;
//	                          grants.sql: the functions not PUBLIC's, and who runs them
//	schema.sql                generated: the current definition of every table, index,
//	                          partition, sequence, view and trigger (not applied)
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
//	015_exactly_once.sql      the key space (keys; tombstones becomes its view) that a
//	                          unique check decides; payloads compared as JSON values;
//	                          traceparents checked; every abort remembered; prune_rows
//	                          keeps what a saga needs; a parked step holds its saga
//	016_failures.sql          reclaimed_lease: the expired lease a reclaimed row keeps, so
//	                          its replica's late completion can still be written
//	017_narrow_queue.sql      the outbox becomes intents (written once) and queue (the
//	                          narrow row the drain rewrites); drainer.outbox their view
//	018_console_scope.sql     intents_scope_idx, intents_tool_idx: the console's scope and tool filters
//	019_audit_head.sql        queue.audit_head: the chain's head on the row, moved by the
//	                          statement that appends the entry
//	020_queue_generations.sql queue partitioned by generation (queue_g1 … queue_g3, a ring,
//	                          and queue_settled, the old table); queue_generations
//	021_audit_generations.sql audit partitioned by generation (audit_p0, the old table,
//	                          … audit_p3, a ring); audit_generations; audit_anchors.replaced
//	022_audit_anchors_chained.sql audit_ledger: one hash chain over the audit's entries, anchors
//	                          and truncations (what a signed checkpoint names); anchors kept as
//	                          versions (audit_anchor_history) with status, attempts and problems
//	023_retry_after_marks.sql retry_after_marks: the longest Retry-After each tool was
//	                          answered per minute, which holds the rows a reclaim takes back
//	024_call_records.sql      call_records: a settled MCP call's whole tool result, which the
//	                          gateway answers its retries with
//	025_tombstone_audit_head.sql keys.audit_head: a pruned key's chain head, kept on its
//	                          tombstone, so that audit verify tells the chain's end moved
//	026_queue_payload_bytes.sql queue.payload_bytes: each row's payload size, which a claim
//	                          bounded by max_in_flight_bytes sums without reading intents
//	027_rotation_cursor.sql   queue_generations.moved_upto: where the rotation's next move of
//	                          a closed generation starts, so that no move reads the moved rows
//	028_audit_key_hash.sql    the audit's per-key index a hash index on key (was a btree on
//	                          key and id): half the pages, less WAL per entry; the btree
//	                          is dropped by 031
//	029_queue_fillfactor.sql  the hot generations' fill factor 50 (was 80), so the claim's and
//	                          the completion's new versions stay on their row's page
//	030_audit_anchor_record.sql the anchor versions found by their ledger record (an index), so
//	                          audit verify reads each record's anchors, not all of them per record
//	031_audit_key_btree_dropped.sql the btree 028 replaced, dropped in a step of its own (in
//	                          028 its lock deadlocked with producers appending to the audit)
//	032_audit_anchors_retired.sql the ledger's 'retired' records; audit_sweep, where the sweep
//	                          of forgotten chains' anchors is (one starts here)
package migrations
