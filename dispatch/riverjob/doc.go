// Package riverjob is the "river" adapter: it hands each outbox row to River
// (github.com/riverqueue/river) as a job inserted into the target database,
// for River workers elsewhere to run.
//
// The job's args are the row's tuple, key and payload:
//
//	{"key": "idem_v1_…", "agent_run_id": "…", "step_id": "…", "tool_name": "…",
//	 "business_scope": "…", "payload": <the row's payload>}
//
// Uniqueness is River's own: the job is unique by its "key" argument alone
// (UniqueOpts ByArgs with only key marked river:"unique", ExcludeKind) in
// every job state, completed, cancelled and discarded included. A second
// dispatch of the same row, whether the first job is waiting, running or
// already done, therefore inserts nothing and is reported as a Replay with
// the existing job's id; a second dispatch with another payload is Terminal
// (payload_mismatch). The guarantee lasts as long as the job row does: River's
// job cleaner deletes completed and cancelled jobs after 24 hours by default,
// and a dispatch after that would insert a new job. KeyTTL reports that
// window (see Adapter.KeyTTL).
//
// Each attempt runs in its own transaction, so everything but the outcome of
// COMMIT itself is known: failures before COMMIT leave no job and are
// reported with Refused (an error the server answered: the attempt counts)
// or NotSent (the server was not reached); only a COMMIT cut off without an answer is
// Ambiguous. Errors carry SQLSTATE codes, never the connection string's
// password or the payload.
//
// The adapter's connection pool has pgx's default size (4 or the number of
// CPUs, whichever is larger); pool_max_conns in the DSN changes it. An
// attempt waiting for a free connection past its deadline is Retry with
// NotSent.
//
// New fails when River's tables are missing or out of date, or the server
// refuses the login (a configuration problem); a server it cannot reach is
// an error wrapping dispatch.ErrUnavailable. Built from a config (`drainer
// run`), such an adapter starts anyway: StartInBackground keeps trying
// (Probe), and until the database answers, rows are held back without an
// attempt (dispatch.ReasonNotReady) and Ready reports false.
package riverjob
