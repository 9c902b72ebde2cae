// Package receiver is the provider's half of drainer's idempotency
// contract: HTTP middleware that makes a handler answer the retries of one
// idempotency key with one effect and a byte-identical stored answer
// (docs/reference.md §11; layout and request flow in docs/receiver.md).
//
//	rc, err := receiver.New(pool, receiver.Options{InTransaction: true, Scope: accountOf})
//	if err != nil { ... }
//	if err := rc.Migrate(ctx); err != nil { ... }
//	http.ListenAndServe(addr, rc.Wrap(mux)) // handlers write through receiver.Tx(r.Context())
//
// Records live in Postgres (table <schema>.records, default schema
// drainer_receiver), keyed by (scope, key) and holding a fingerprint of the
// request (method, path and the RFC 8785 canonical JSON body), so every
// replica of a service, and services written with the Python and TypeScript
// receivers of sdk/, share one store. All time decisions use the database
// clock, so clock skew between replicas does not matter.
//
// A first request claims the key with an in-flight record, runs the handler
// and stores its answer (not a 5xx, by default); a retry gets the stored
// answer with Idempotency-Replay: true; the same key with another request
// gets 409 payload-mismatch; a retry while the first still runs gets 409
// in-flight with Retry-After. A handler that panics releases its record and
// the panic goes on to the server.
//
// With Options.InTransaction (the recommended way) the record is written in
// the transaction the handler writes its effect through (Tx(ctx)), and
// completed in it: a process that dies mid-request rolls back both, and a
// retry runs the handler again. Without it the handler's effect may be
// committed when its process dies: the record's deadline, moved forward
// while the handler runs, lapses, and after Options.RecoveryTimeout a retry
// gets 409 outcome-unknown, the handler does not run again, and the record
// is reported (an Error log line, drainer_receiver_abandoned_total) for a
// person, unless Options.RerunAbandoned declares the handler safe to run
// twice.
//
// # Files
//
//	options.go      Options, Mode, the defaults, DefaultRequireKey
//	receiver.go     New, Wrap, Tx: the request flow, key and tuple checks,
//	                replays
//	store.go        Migrate, Prune, RunPruner and the SQL of the flow (claim,
//	                keepAlive, complete, release), fenced by locked_until
//	metrics.go      drainer_receiver_abandoned_total and the report of an
//	                abandoned record
//	fingerprint.go  Fingerprint and CanonicalBody (JCS via gowebpki/jcs)
//	recorder.go     the buffered ResponseWriter of a keyed request
//	problem.go      RFC 9457 problem+json answers
//
// Tests: receiver_test.go (every case of docs/receiver.md on a real
// Postgres), crash_test.go (a process killed with SIGKILL mid-handler, with
// and without InTransaction), fingerprint_test.go (testdata/fingerprint-vectors.json, shared
// with the Python and TypeScript receivers; -update rewrites it),
// bench_test.go (BenchmarkOverhead: p50/p99 latency with and without the
// receiver).
package receiver
