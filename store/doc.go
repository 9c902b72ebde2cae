// Package store holds every statement drainer runs on its own tables. The
// engine, the saga runner, the operator commands (package ops), the
// producer, the fleet and the demo call it; outside tests, no other code
// writes SQL on these tables, except the migrations that create them.
//
// One executor: every method takes the DB it runs on (a pool, a
// connection or a transaction), so the caller decides what shares a
// transaction. One way of naming the schema: statements are constants
// written with {s}, which Store.sql replaces with a schema validated by New.
// Values travel as arguments, never in the text; the only text built at run
// time is a fixed set of conditions chosen by a typed filter (Filter.where,
// the claim's clauses).
//
// # Files
//
//	store.go        DB, TxDB, Store and the {s} rule; Notify, NotifySaga
//	enqueue.go      Enqueue, EnqueueBatch (drainer.enqueue)
//	counters.go     ReadEnqueueCounters (enqueue's retry-tax sequences)
//	claim.go        Claim: the lease of due rows, one short statement
//	complete.go     Complete: fenced completions of leased rows (and late ones
//	                of reclaimed rows nobody claimed since), one batch
//	reclaim.go      Reclaim: expired leases back to pending or parked, held
//	                for a Retry-After the lost answer may have carried
//	deferral.go     Defer, Wake: a paused or limited tool's due times
//	scopehold.go    HoldScopes, ReleaseScopes: the rows queued behind a scope's
//	                first row of an ordered tool held, and the next one made due
//	schedule.go     Reschedule: given rows due at given delays
//	pause.go        ReadPauses: the pause set the daemons apply
//	pause_admin.go  ListPauses, InsertPause, DeletePause, ReadPause: the operator's side
//	saga.go         AdvanceSaga, SweepSagas, QueueAlerts
//	snapshot.go     RefreshSnapshot, ReadSnapshot: the backlog gauges
//	retention.go    Prune, RotateAudit (the audit's generations), WithRetentionLock
//	rotate.go       RotateQueue: one step of the generations' rotation (settled rows
//	                out of a drained generation, then its truncation)
//	locks.go        the daemons' advisory lock keys
//	witness.go      LastSucceeded: a row a detect probe proves itself on
//	rows.go         Row, Filter (status, run, tool, age, scope, payload containment),
//	                RowSummary, RunRow, Tombstone: EachRow, ListRowSummaries (the
//	                console's lists: no payload, no response), ReadRow, RowStatus,
//	                RunRows, ReadTombstone (list, inspect, and the reads of every action)
//	candidates.go   Candidate: CandidateOf, Candidates, FailedCandidates (requeue, cancel)
//	actions.go      Requeue, Cancel, Settle, MarkCompensated: the actions' conditional writes
//	abort.go        RunExists, ReadAbort, AbortRun, ReadSaga, CountCancelled, ContinueSaga
//	revive.go       AbortedRuns, LockSagas, LockRuns, Restorable, FirstFailed, DeleteRun,
//	                RestoreRun: requeue's revival of an aborted run
//	audit.go        SetActor, AuditAppend, AuditAppendEach, AuditTrail, CountAudit, VerifyAudit
//	audit_ledger.go AuditLedger, AuditGenerations, AuditHorizon, TransactionsRunning,
//	                ExtendAuditLedger, EachAuditEntry, EachAnchorVersion: the audit's ledger,
//	                read raw for audit checkpoint and verify --checkpoints
//	console.go      RowFloor, VerifyAuditKey, VerifyAuditKeyLedger (one key's ledger
//	                records), CountsByTool, CountsByTopTools (bounded), ViewKeys: the
//	                operator console's reads
//	progress.go     ReadProgress, CountByStatusKind (the demo's progress and summary)
//	stats.go        CountStatuses, OldestPendingByTool, SettledSince: drainer stats
//	fleet.go        the fleet's tables in its coordination database (package
//	                internal/fleet): EnsureFleetTables, FleetHeartbeat, FleetLeave,
//	                FleetReleaseAll (the membership), PublishFleet (each replica's
//	                backlogs, and the whole fleet's read back, in one round trip)
//
// The daemon's statements wrap their errors with the operation they
// performed. The operator statements (rows.go through audit.go) return the
// driver's error as it is: package ops names the action and the row in its
// message, and the statement would only repeat it.
package store
