// Package mockprovider is an in-process HTTP provider that behaves like a real
// idempotent API (Stripe-style Idempotency-Key semantics) and injects faults on
// demand. It backs `drainer demo`, the end-to-end tests and the benchmarks.
//
// Every request must carry an Idempotency-Key header. Per key, the provider
// keeps one record:
//
//   - The first request that reaches the "effect" applies it once, stores the
//     SHA-256 of the body with the answer, and counts one effect.
//   - A later request with the same key and the same body gets the stored
//     answer again with "Idempotency-Replay: true" and counts no effect.
//   - The same key with a different body gets 409 with
//     "Idempotency-Conflict: payload-mismatch" (terminal for the client).
//   - A request whose key is being processed by another request gets 409
//     without that header (the client retries later).
//
// A request that fails before the effect (a fault, a client that went away)
// leaves no stored answer, so a retry is processed afresh, as with Stripe.
//
// Faults are configured in Config. The per-request fault choice is a pure
// function of (Seed, key, n), where n counts the requests seen with that key,
// so a run is reproducible whenever each key's requests arrive in the same
// order, whatever the interleaving between keys.
//
// Bookkeeping (Effects, KeysForTuple, DuplicateEffects, Snapshot, ...) is safe
// for concurrent use. No lock is held across a sleep or any network I/O.
//
// # Files
//
//	mockprovider.go  the wire names, Provider, New, Start, Close
//	config.go        Config: the fault rates and the other behaviours
//	handler.go       ServeHTTP: validate, wait, admit, then the effect or a fault
//	idempotency.go   the per-key record: admit, commit, release; Effects,
//	                 DuplicateEffects
//	fault.go         pickFault: the fault drawn from (Seed, key, n)
//	response.go      SuccessBody, ResponseID, problem answers, the dropped connection
//	accounting.go    Retry-After violations and the order of applied compensations
//	stats.go         Stats and its counters: Snapshot, TotalEffects, Requests, Replays
//	tuples.go        keys seen per tuple header: KeysForTuple, MultiKeyTuples
package mockprovider
