// Package drainer is the drain engine. It knows no config file: the daemon
// (internal/daemon) builds its Routing from config and hands it over; every
// statement it runs is in package store.
//
// A row's life, one file per step:
//
//   - claimed: claimer.go leases due rows when worker slots are free
//     (store.Claim: FOR UPDATE SKIP LOCKED, one short transaction) and runs
//     preflight on each (no route, out of attempts or past its key's
//     window, shutting down, paused): such a row is settled without a worker.
//     handoff.go: Lease takes the row the MCP gateway of this process
//     records and leases in one transaction (store.EnqueueLeasedBatch), within
//     the same slot bound; Admit lets its read-only calls through the
//     pauses and the adapter's gate.
//   - dispatched: worker.go takes a row through its adapter's gate (gate.go:
//     breaker, rate limit, concurrency cap, a row waiting in its worker for
//     a slot or a token within Config.GateWait; authhold.go: auth holds per
//     route and, once several routes are refused, per adapter), one attempt
//     through dispatch.Adapter within the lease, and classify (a call cut off by
//     shutdown is ambiguous; detect.go probes an ambiguous attempt of a
//     non_idempotent route).
//   - rescheduled: decide.go is where a row's next state is decided —
//     status, attempt consumed or given back, delay (backoff.go: Full
//     Jitter floored by Retry-After) and the not_before floor — for every
//     outcome, refusals included.
//   - written: completer.go writes completions in batches, fenced by the
//     lease token (store.Complete), isolating a row the database refuses;
//     unwritten.go keeps the completions it could not write while the
//     lease lasted and writes them late over the reclaimed row (those left
//     when the engine stops go to the next engine on the database:
//     Engine.Unwritten, Config.Inherited), and those another transaction's
//     lock holds back, writing the rest of their batch around them; rows
//     handed back to wait for a route or a resume are woken again if that
//     came meanwhile.
//   - compensated: the completion hands the runs whose saga may move to
//     compensations.Runner.
//
// Around it, each a service with its own Start/Stop (internal/maintenance):
// the deferrer (deferral.go: bulk deferral of a refused tool's rows and
// wakes, one goroutine), the scope holds (scopehold.go: the rows queued
// behind a scope's first row of an ordered tool held out of the claims'
// way, the next one made due when it settles), the listener (listen.go; wakegate.go: the wake
// gate, on its own goroutine and connection, holds a slot while the claim
// loop sleeps, so producers notify only then), the pause watcher
// (pause.go), the reclaimer of expired leases (reclaim.go; a reclaimed row
// is due at once, held only by its floor, its tool's recent Retry-After and
// its route's reclaim_hold: Routing.ReclaimPolicy), the backlog
// snapshotter (snapshot.go), the pruner (retention.go), the rotator of
// the queue's generations (rotation.go), the probe
// calibrator (detect.go) and the saga runner. engine.go holds the
// lifecycle: Start, Reload (routing.go: routes refcounted across reloads;
// with SharedAdapters, Routing.Release tells the adapters' owner instead),
// and stop.go Stop in order (stop claiming, wait for calls up to the grace,
// cancel, write what is left within a few seconds of the grace, stop the
// services). dbhealth.go turns the
// subsystems' database errors into one line when the database goes down
// and one when it is back. metrics.go holds the collectors;
// readiness.go what each adapter's gate says of it (AdapterStates, for
// /readyz, drainer_adapter_ready and drainer_hold_seconds).
//
// Life cycle of a row:
//
//	enqueue ──► pending ──claim──► in_flight ──► succeeded
//	              ▲  │                 │  ├────► failed ──► (saga) ──► compensated
//	  retry/auth/ │  │                 │  ├────► outcome_unknown (non_idempotent; drainer resolve)
//	  unrouted ───┘  └─► cancelled     │  └────► compensation_failed (compensation rows)
//	                                   └─ lease expired ──► pending (attempt consumed)
package drainer
