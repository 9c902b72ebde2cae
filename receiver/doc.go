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
// request (method, path and the RFC 8785 canonical JSON body; a body with a
// number JCS would not keep exactly is taken byte for byte), so every
// replica of a service, and services written with the Python and TypeScript
// receivers of sdk/, share one store. All time decisions use the database
// clock, so clock skew between replicas does not matter.
//
// A first request claims the key with an in-flight record, runs the handler
// and stores its answer (not a 5xx, by default); a retry gets the stored
// answer with Idempotency-Replay: true; the same key with another request
// gets 409 payload-mismatch; a retry while the first still runs gets 409
// in-flight with Retry-After. A handler that panics releases its record and
// the panic goes on to the server (outside InTransaction a retry then runs
// it again, also when its effect happened). Once a request has claimed its
// key, its handler and the receiver's statements run with
// context.WithoutCancel of the request's context: a caller that hangs up
// (drainer's adapter timing out) cancels nothing, so the effect and the
// answer are committed and the retry gets the replay. The receiver puts no
// deadline on a handler. A serialization failure or deadlock is answered
// 503 serialization-failure, and with InTransaction a pool with no
// connection free within 30 s 503 pool-exhausted (both Retry-After: 1). An expired key is a new first request,
// except while its first request still runs: that record answers in-flight
// (or payload-mismatch) as before its TTL passed.
//
// With Options.InTransaction (the recommended way) the record is written in
// the transaction the handler writes its effect through (Tx(ctx)), and
// completed in it: a process that dies mid-request rolls back both, and a
// retry runs the handler again. The transaction sets
// idle_in_transaction_session_timeout (Options.IdleInTransactionTimeout,
// default 1 minute), so a host that froze or vanished mid-handler holds
// the key no longer than that. Each keyed request holds a pool connection
// for its whole handler: size the pool for them. The answer is stored however long the
// handler ran: the bound on storing it (30 s) starts when the handler
// returns. The handler runs after a savepoint taken after the claim: when
// a statement of its own failed (its transaction is aborted, nothing of its
// effect can commit), an error answer (4xx, or 5xx with StoreServerErrors)
// is stored after rolling back to the savepoint, while an answer below 400,
// which claims an effect that did not happen, is not stored: the client
// gets 500 transaction-aborted, the record is released and a retry runs
// the handler again. Without InTransaction the handler's effect may be
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
//	transaction.go  the request flow with Options.InTransaction: acquire,
//	                begin (idle timeout), claim, savepoint, handler,
//	                completion in one transaction
//	store.go        Migrate, Prune, RunPruner and the SQL of the flow (claim,
//	                keepAlive, complete, release), fenced by locked_until
//	metrics.go      drainer_receiver_abandoned_total and the report of an
//	                abandoned record
//	fingerprint.go  Fingerprint and CanonicalBody (JCS via gowebpki/jcs, with
//	                the exact-number check)
//	recorder.go     the buffered ResponseWriter of a keyed request
//	problem.go      RFC 9457 problem+json answers; the 503 naming a
//	                serialization failure or an exhausted pool
//
// Tests: receiver_test.go (every case of docs/receiver.md on a real
// Postgres), transaction_test.go (InTransaction: a handler outlasting the
// store's bound, a handler whose own statement failed), expiry_test.go (a
// TTL passing while the first request runs), export_test.go (LapseBounds,
// which makes the store's bounds lapse on a test's word), crash_test.go (a
// process killed with SIGKILL mid-handler, with and without InTransaction),
// hangup_test.go (a caller hanging up while the handler works),
// failures_test.go (a frozen host's session ended by the idle timeout, an
// exhausted pool, a serialization failure, an unknown key version),
// fingerprint_test.go (testdata/fingerprint-vectors.json, shared with the
// Python and TypeScript receivers; -update rewrites it), bench_test.go (BenchmarkOverhead: p50/p99 latency with and without the
// receiver).
package receiver
