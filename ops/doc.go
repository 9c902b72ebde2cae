// Package ops implements drainer's operator actions as library code: list,
// inspect, requeue, cancel, resolve, abort, pause, resume, audit verify and
// audit checkpoint.
// The `drainer` CLI commands are thin wrappers around it.
//
// The package holds the operator logic: validation, the rules below, dry
// runs, batching, the actor and the messages. Every statement it runs is
// package store's (rows.go, candidates.go, actions.go, abort.go, revive.go,
// pause_admin.go, audit.go there), on the schema of the *store.Store the
// Client is given, through one store.TxDB (a pool or a connection).
//
// Every action runs in one transaction that first names its actor
// (store.SetActor: the transaction-local settings drainer.actor,
// drainer.reason and drainer.action, "operator:<verb>"), so the audit
// triggers record who changed each row and why; an action that changes no
// row's status appends its own entry (store.AuditAppend). Every change is
// conditional on the status that was read (store.Requeue, Cancel, Settle
// write a row only while it still has that status): a row the daemon changed
// in the meantime is reported as a refused transition naming its new status,
// never overwritten. A dry run reads in a read-only transaction and writes
// nothing.
//
// # Rules
//
// requeue makes a row pending and due now, keeping its key:
//   - failed: attempts reset to 0 (a fresh retry budget, e.g. after an
//     outage); first_attempt_at is kept, so the key-TTL guard still stops a
//     key the provider may have forgotten.
//   - pending: due now; attempts unchanged.
//   - cancelled: pending again, attempts unchanged, unless its run is aborted.
//   - refused: succeeded, compensated (the effect happened or was undone),
//     in_flight (a worker holds the lease), outcome_unknown and
//     compensation_failed (use resolve).
//
// A failed forward row aborted its run (docs/reference.md §6). Requeueing it revives
// the run (deletes its runs row and makes the never-attempted rows the abort
// cancelled pending again) only when that is safe: the abort was caused by a
// row failure (aborted_by "drainer", and no agent or operator asked for the abort: runs.abort_requests is 0), the saga
// has not started (no compensation row, no compensated row), and every failed
// forward row of the run is requeued in the same transaction. Otherwise the
// row is refused: re-running a step of an aborted run would fight its saga.
// Cancelled rows of an aborted run are refused too; requeueing the failed
// row revives them.
//
// cancel turns pending forward rows into cancelled, with last_error naming
// the actor and reason. A pending row with attempts > 0 is cancelled with a
// warning: a request was sent, its effect may exist, and cancelling does not
// undo it. Pending compensation rows are refused (cancelling one would mark
// its forward row compensated without undoing anything).
//
// resolve settles a parked row: outcome_unknown becomes succeeded or failed
// (--outcome; a failed forward row aborts its run through the trigger, a
// failed compensation row becomes compensation_failed), compensation_failed
// becomes cancelled with the note kept, its forward row compensated, and the
// saga continues.
//
// # Files
//
//	ops.go      Client, Who, the action and read-only transactions
//	filter.go   Filter (status, run, tool, age, scope, payload containment) and List
//	inspect.go  Inspect: a row, its run, its saga and its audit trail
//	bulk.go     one key or a filter in batches: plan, apply, Result
//	requeue.go  requeue's rules and its writes
//	revive.go   requeue's revival of an aborted run
//	cancel.go   cancel's rules and its writes
//	resolve.go  resolve of parked rows
//	abort.go    abort of a run
//	pause.go    pause, resume and the list of pauses
//	audit.go    audit verify
//	stats.go    Stats: drainer stats (backlog, oldest pending, rows settled lately)
//	checkpoint.go         audit checkpoint: the file, its keys, its signature
//	checkpoint_verify.go  verify --checkpoints: a checkpoint still a prefix of the audit
//	audithash.go          the audit's hash functions in Go, as the database computes them
//	errors.go   refusals and their messages; row.go the row type
package ops
