// Package gateway is the durable MCP gateway (docs/reference.md §13): an MCP
// server on Streamable HTTP that agents point their MCP client at instead of
// their tool servers. Every tools/call is recorded in the outbox (committed
// before anything is sent), dispatched by the engine through the route's mcp
// adapter with the call's key, and answered with the tool result recorded
// when its row settled. A retry of the call, under any request id, maps to
// the same four-tuple and key, so it is answered from that record (or waits
// for the call in flight) and never reaches the tool a second time.
//
// Files:
//
//	gateway.go  Config, New, Serve, Shutdown: the HTTP server, its bearer
//	            token, the MCP server (the official Go SDK's, stateless, so
//	            both 2026-07-28 and 2025-11-25 clients are served and a
//	            restart loses no session)
//	admit.go    what a POST must be before the SDK sees it: read only while
//	            fewer than Config.MaxRequests are, one JSON-RPC message (no
//	            batch), and a tools/call only while fewer than
//	            Config.MaxCalls are in progress (503 and Retry-After otherwise);
//	            a call's slot is freed when its agent hangs up (hungUp)
//	tools.go    the tools listed: each routed tool of the config's mcp
//	            adapters, with the server's own definition; drainer_abort_run
//	call.go     one tools/call: its tuple (identity.go), its record and
//	            lease to the engine of this process (Config.Lease), its wait;
//	            a read-only call passed through once admitted (Config.Admit)
//	record.go   the records of the calls arriving while one is written,
//	            written together in the next transaction
//	            (store.EnqueueLeasedBatch); a batch that fails, each alone
//	identity.go the four-tuple of a call: _meta, X-Agent-Run-Id, the derived
//	            auto- step id; its payload, the arguments as sent
//	stepform.go the canonical form of the arguments the auto- step id hashes:
//	            RFC 8785, or an exact form when a number is not exact as a
//	            double (StepForm)
//	answer.go   the answer of a recorded call from its row and record
//	abort.go    drainer_abort_run
//	settle.go   waiting for rows to settle: told in process by this process's
//	            engine (Gateway.Settled), one LISTEN connection on the settle
//	            channel (re-armed when it dies) for the others, and a recheck
//	retry.go    onLive: a statement safe to run again (the record, the
//	            reads, the wake-up, the abort) runs once more on a live
//	            connection when its connection was lost
//	metrics.go  drainer_gateway_calls_total and drainer_gateway_call_seconds
//
// What is kept where: the call's row is an ordinary outbox row (its tuple
// names the run), so the console, the CLI and the sagas see it like any
// other; the tool result the first call got is kept in call_records
// (migrations/024_call_records.sql), written by the completion that settled
// the row, in its transaction (store.Complete, store/calls.go).
package gateway
