// Package demo runs `drainer demo`: a throwaway Postgres, a built-in mock
// provider with injected faults, sample intents (most succeed after retries,
// a few fail terminally, one saga is compensated), drained by the same daemon
// code as `drainer run`, with progress and a summary. It leaves nothing running.
//
// # Files
//
//	demo.go      Options, the demo's config, Run; enqueueSamples (the runs and the
//	             saga), watch (progress), summary
//	postgres.go  startPostgres: from the local binaries (package pgtemp), else
//	             in Docker
package demo
