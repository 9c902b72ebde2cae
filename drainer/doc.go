// Package drainer is the drain engine: it claims due outbox rows under a lease
// (claim.go), dispatches each to its route's adapter outside any transaction
// (worker.go), decides the row's next state from the classified result
// (decide.go, backoff.go) and writes it back in fenced batches (complete.go).
// Expired leases are reclaimed (reclaim.go); LISTEN/NOTIFY wakes the claimer
// (listen.go). EnqueueTx (enqueue.go) is the producer API.
//
// Life cycle of a row:
//
//	enqueue ──► pending ──claim──► in_flight ──► succeeded
//	              ▲  │                 │  ├────► failed ──► (saga) ──► compensated
//	  retry/auth/ │  │                 │  ├────► outcome_unknown (non_idempotent; drainer resolve)
//	  unrouted ───┘  └─► cancelled     │  └────► compensation_failed (compensation rows)
//	                                   └─ lease expired ──► pending (attempt consumed)
package drainer
