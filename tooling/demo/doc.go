// Package demo runs `drainer demo`: a throwaway Postgres, a built-in mock
// provider with injected faults, sample intents (most succeed after retries,
// a few fail terminally, one saga is compensated, one answer is lost after
// its effect and settled by a replay), drained by the same daemon code as
// `drainer run`, with progress and a summary that explains every row beyond
// the enqueued intents (the saga's compensation rows) and shows the lost
// answer counted as a replay. It leaves nothing running.
//
// RunGateway runs `drainer demo --gateway`: `drainer run` with its MCP
// gateway in front of a mock MCP tool server; an agent's charge_card call
// is cut mid-call by its harness and re-sent twice under new request ids,
// and the summary shows one effect upstream.
//
// # Files
//
//	demo.go      Options, the demo's config, Run; enqueueSamples (the runs and the
//	             saga), lostAnswer, watch (progress), summary, dispatchCount
//	             (the daemon's drainer_dispatch_total, read in process)
//	postgres.go  startPostgres: from the local binaries (package pgtemp), else
//	             in Docker
//	gateway.go   RunGateway: the mock MCP tool server (chargeServer), the
//	             harness (runHarness), gatewaySummary
//	logfile.go   openLog: the daemon's logs in a file the output names
package demo
