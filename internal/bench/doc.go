// Package bench runs `drainer bench` (CONTRACT §8): it measures the drain
// engine against the same Postgres server the figures are compared on, and
// reports every figure with the configuration it was measured under.
//
// What is measured, in order, each phase on a freshly filled outbox
// (TRUNCATE, COPY, ANALYZE, CHECKPOINT, so no phase pays for the previous
// one's writes):
//
//   - drain_rows_per_s: a pre-filled backlog drained by Replicas engines in
//     this process, each with its own pool, through the real engine (claim,
//     gate, dispatch, batched completion, audit triggers) with a no-op
//     adapter (a [dispatch.AdapterFunc] answering Success at once). The
//     configuration is the shipped default: the defaults the config package
//     applies to a file that sets nothing but one adapter and one route
//     (workers 64, lease 30s, breaker 5 failures / 30s, max_attempts 10, …),
//     the engine defaults of drainer.Config (batch min(workers, 64), fetch
//     cooldown 2ms, poll 1s, completion batches of 256) and the pool size of
//     `drainer run` (min(workers/4+8, 64) connections). Measured from engine
//     start until every row is succeeded in the database; best of DrainRuns.
//   - river_jobs_per_s: River on the same server, in its own schema, with the
//     same job count inserted beforehand (InsertManyFast), a no-op worker,
//     the same number of clients and MaxWorkers per client as engines and
//     workers, each client its own pool of the same size. Measured like
//     River's riverbench: from client start until the last job-completed
//     event. The best of a few FetchCooldown/FetchPollInterval settings,
//     riverbench's own (2ms/20ms) among them.
//   - ceiling_rows_per_s: a bare loop of the engine's claim statement shape
//     (one pipelined round trip: BEGIN, the plan settings, the FOR UPDATE
//     SKIP LOCKED claim to in_flight, COMMIT) and one batch completion to
//     succeeded per claimed batch, no dispatch, against the same schema with
//     the same triggers (audit on): what the table shape allows. The best
//     of a few loop counts, claiming the engine's claim batch and the
//     engine's completion batch (256) at a time.
//   - backlog_ratio: the dispatch rate over the first BacklogMeasured rows of
//     a BacklogLarge backlog divided by the same over a BacklogSmall backlog
//     (from the first dispatch to the BacklogMeasured-th), each the best of
//     two runs.
//   - latency_p50_ms, latency_p90_ms, latency_p99_ms: from an enqueue's
//     commit (producer.EnqueueTx in a single-row transaction, as an agent
//     would) to the start of its dispatch, while 32 producers offer half of
//     the measured drain rate; rows committed during the warm-up are left
//     out. latency_achieved_rows_per_s says what the producers reached: on a
//     durable server single-row enqueues can fall short of the offer.
//   - peak_rss_bytes: getrusage(RUSAGE_SELF) ru_maxrss right after the drain
//     runs, when the process has hosted nothing but the replicas (and the
//     COPY that filled their backlog). The replicas share the process, so
//     this is their sum, an upper bound for the largest one.
//     process_peak_rss_bytes is the same at the end of the whole run (River,
//     a large backlog and producers included).
//
// On a database given by URL, bench works in schemas of its own (Schema and
// Schema+"_river"), marks them with a comment, refuses to touch an existing
// schema without that mark, and drops them when done.
package bench
