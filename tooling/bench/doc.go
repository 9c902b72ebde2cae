// Package bench runs `drainer bench` (docs/reference.md §8): it measures the drain
// engine against the same Postgres server the figures are compared on, with
// the same row count for every rate, and reports every figure with the
// configuration it was measured under. docs/benchmarks.md describes each
// field; in short, in the order Run measures them:
//
//   - drain_rows_per_s: a pre-filled backlog (COPY, VACUUM ANALYZE, CHECKPOINT)
//     drained by Replicas engines in this process, each with the pool
//     `drainer run` would give it, configured from the shipped defaults,
//     around a no-op adapter; engine start until every row is succeeded,
//     best of DrainRuns. xacts_per_row and wal_bytes_per_row come from
//     pg_stat_database.xact_commit and pg_current_wal_lsn over those runs
//     (the replica pools are closed after each run, so their backends have
//     reported their counts).
//   - drain_no_audit_rows_per_s and audit_cost: the same with the audit
//     triggers disabled.
//   - ceiling_rows_per_s: bare claim/complete loops on a minimal table
//     (ceiling.go), best of batches 100 and 1,000 × 2 and 4 loops.
//   - river_jobs_per_s: River at its own benchmark's settings and at
//     drainer's worker count (river.go).
//   - backlog_ratio, latency (latency.go), xmin_ratio (xmin.go), the http
//     adapter against a local 50 ms provider (http.go), enqueue and insert
//     rates (enqueue.go).
//   - gateway_overhead_p50_ms and _p99_ms (gateway.go): tools/calls from 8
//     MCP clients to a local MCP server, direct and through the gateway of
//     a `drainer run` in this process (daemon.Run), each call a new row; a
//     percentile through the gateway minus the same percentile direct.
//   - peak_rss_bytes: the largest VmHWM of Replicas replica processes
//     (replica.go), each re-executing the binary (Options.ReplicaCommand)
//     to run one engine with 1,000 rows in flight.
//
// On a database given by URL, bench works in schemas of its own (Schema and
// Schema+"_river"), marks them with a comment, refuses to touch an existing
// schema without that mark, and drops them when done, also when its context
// is cancelled. Otherwise it starts a throwaway durable cluster and removes
// it.
//
// replay.sql is not run by bench: it is the in-server replay, the engine's
// claim and completion statements and the ceiling's looped inside the
// server with no client, run by hand with psql (docs/benchmarks.md,
// "Reproduce"); replay_test.go keeps it in step with the schema.
package bench
