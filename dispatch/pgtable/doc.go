// Package pgtable is the "postgres" adapter: it delivers each outbox row by
// inserting it into a recipient table of another PostgreSQL database, keyed
// by the row's idempotency key, so the recipient sees every intent at most
// once and can process the table at its own pace.
//
// # The recipient table
//
// The table is configured as "table" or "schema.table" (each part a plain
// identifier, used as written) and must exist: New checks it and names what
// is missing. RecipientTableDDL creates it:
//
//	CREATE TABLE app.effects (
//	    key            text PRIMARY KEY,
//	    agent_run_id   text NOT NULL,
//	    step_id        text NOT NULL,
//	    tool_name      text NOT NULL,
//	    business_scope text NOT NULL,
//	    payload        jsonb NOT NULL,
//	    received_at    timestamptz NOT NULL DEFAULT now()
//	);
//
// The adapter writes key, agent_run_id, step_id, tool_name, business_scope
// (text or varchar) and payload (jsonb); key must be the primary key or have
// a unique, non-deferrable index of its own. received_at and any other
// column are optional, but must have a default or allow NULL. The
// connecting role needs INSERT and SELECT on the table.
//
// # Dispatch
//
// Each attempt runs, in autocommit,
//
//	INSERT INTO app.effects (key, agent_run_id, step_id, tool_name, business_scope, payload)
//	VALUES (…) ON CONFLICT (key) DO NOTHING RETURNING true
//
// A new key is Success. On a conflict the stored payload is compared with
// jsonb equality (key order and white space do not matter): equal is Replay,
// different is Terminal (payload_mismatch). Success and Replay store the
// response {"inserted": true, "table": "app.effects"}.
//
// # Errors
//
// An error answer from the server means the statement rolled back, so
// nothing happened (Result.Refused: the attempt counts, so a table that
// refuses every time fails the row at its route's max_attempts, and a
// retry is safe on any route). By SQLSTATE: serialization failures,
// deadlocks and lock timeouts (40001, 40P01, 55P03), connection and server
// shutdown errors (class 08, 57P01-57P05), insufficient resources (53),
// system errors (58) and a read-only standby after a failover (25006) are
// Retry; syntax and schema errors (42), constraint violations other than the
// key conflict (23), data errors (22, e.g. a payload jsonb refuses) and the
// rest are Terminal. When the attempt's deadline passes, the adapter asks the
// server to cancel the statement: a confirmed cancel is Retry (nothing
// happened); no confirmation within a second, or a connection lost after
// the statement was sent, is Ambiguous. A connection that cannot be opened
// is Retry with NotSent.
//
// Errors carry the SQLSTATE and the server's primary message only, never the
// detail fields (where Postgres quotes row values), the payload or the DSN's
// password. A trigger on the table that raises a message quoting NEW.payload
// would defeat that; don't write one.
//
// # Starting
//
// New fails when the table cannot receive rows, or the server refuses the
// login (a configuration problem); a server it cannot reach is an error
// wrapping dispatch.ErrUnavailable. Built from a config (`drainer run`),
// such an adapter starts anyway: StartInBackground keeps trying (Probe),
// and until the database answers, rows are held back without an attempt
// (dispatch.ReasonNotReady) and Ready reports false.
package pgtable
