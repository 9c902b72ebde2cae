package riverjob

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/internal/pgreach"
)

// Reasons of this adapter's results, besides dispatch.ReasonConnect,
// ReasonTimeout, ReasonCancelled, ReasonConnection, ReasonReplay,
// ReasonPayloadMismatch and ReasonAuth.
const (
	ReasonInserted      = "inserted"       // a new job was inserted
	ReasonDBTransient   = "db_transient"   // serialization failure, deadlock, lock or resource shortage: retry
	ReasonDBUnavailable = "db_unavailable" // the server is shutting down, starting, read-only or unreachable
	ReasonDBRejected    = "db_rejected"    // the server refused the job for good (missing table, constraint, ...)
	ReasonCommitUnknown = "commit_unknown" // COMMIT was sent and no answer came: the job may exist
	ReasonInvalidArgs   = "invalid_payload"
)

// phase is the step of an attempt an error happened in.
type phase int

const (
	phaseBegin  phase = iota // acquiring a connection and beginning the transaction
	phaseInsert              // inside the transaction: nothing is committed
	phaseCommit              // COMMIT: the job may or may not exist
)

// classify maps an error of phase p to a result. ctx is the attempt's
// context. Before COMMIT nothing can have taken effect (the transaction is
// rolled back, or dies with its connection), so no result there may have
// had an effect: an error the server answered is Refused (the attempt
// counts), one that never reached it NotSent; a COMMIT that got an error
// answer did not commit either. Only a COMMIT without an answer is
// Ambiguous.
func classify(ctx context.Context, p phase, err error) dispatch.Result {
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		if pgreach.Missing(pgErr.Code) {
			// River's tables (or schema) are gone: the start checked them,
			// so someone dropped or renamed them since. Every row would
			// fail alike; they wait, no attempt consumed, until they are back.
			return dispatch.Result{Outcome: dispatch.Retry, NotSent: true, AwaitsFix: true, Reason: dispatch.ReasonNotReady,
				Err: fmt.Errorf("%w; the row waits until it is back (no attempt consumed)", &sqlError{op: p.String(), code: pgErr.Code, msg: safeMessage(pgErr)})}
		}
		r := classifySQLState(pgErr.Code)
		r.Refused = true // the server answered: the attempt counts
		r.Down = r.Reason == ReasonDBUnavailable || r.Reason == ReasonDBTransient
		r.Err = &sqlError{op: p.String(), code: pgErr.Code, msg: safeMessage(pgErr)}
		return r
	}
	maybeSent := p == phaseCommit && !pgconn.SafeToRetry(err)
	r := dispatch.Result{Outcome: dispatch.Retry, NotSent: !maybeSent}
	if maybeSent {
		r.Outcome = dispatch.Ambiguous
	}
	switch {
	case errors.Is(ctx.Err(), context.Canceled) || errors.Is(err, context.Canceled):
		r.Reason = dispatch.ReasonCancelled
		r.Err = fmt.Errorf("%s: cancelled: %w", p, context.Canceled)
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded):
		r.Reason = dispatch.ReasonTimeout
		if maybeSent {
			r.Reason = ReasonCommitUnknown
		}
		r.Err = fmt.Errorf("%s: no answer in time: %w", p, context.DeadlineExceeded)
	case p == phaseBegin:
		r.Reason = dispatch.ReasonConnect
		r.Err = fmt.Errorf("%s: %w", p, redactConnectError(err))
	default:
		r.Reason = dispatch.ReasonConnection
		if maybeSent {
			r.Reason = ReasonCommitUnknown
		}
		r.Err = fmt.Errorf("%s: connection lost: %w", p, redactConnectError(err))
	}
	return r
}

func (p phase) String() string {
	switch p {
	case phaseBegin:
		return "begin transaction"
	case phaseInsert:
		return "insert job"
	default:
		return "commit"
	}
}

// classifySQLState classifies an error the server answered with.
func classifySQLState(code string) dispatch.Result {
	class := code[:min(2, len(code))]
	switch {
	case code == "40001", code == "40P01", // serialization failure, deadlock
		code == "55P03", // lock not available (lock_timeout)
		code == "57014", // query cancelled (statement_timeout)
		class == "53",   // insufficient resources (disk, memory, connections)
		class == "58",   // system error (I/O)
		class == "XX":   // internal error
		return dispatch.Result{Outcome: dispatch.Retry, Reason: ReasonDBTransient}
	case class == "08", // connection exception
		strings.HasPrefix(code, "57P"), // admin, crash shutdown, cannot connect now
		code == "25006":                // read-only transaction: a standby after a failover
		return dispatch.Result{Outcome: dispatch.Retry, Reason: ReasonDBUnavailable}
	case class == "28", code == "42501": // bad credentials, missing privilege
		return dispatch.Result{Outcome: dispatch.Auth, Reason: dispatch.ReasonAuth}
	default: // missing table or column (42), constraint (23), data (22), trigger-raised, ...
		return dispatch.Result{Outcome: dispatch.Terminal, Reason: ReasonDBRejected}
	}
}

// sqlError is the redacted error of an answer from the server.
type sqlError struct {
	op, code, msg string
}

func (e *sqlError) Error() string {
	if e.msg == "" {
		return fmt.Sprintf("%s: SQLSTATE %s", e.op, e.code)
	}
	return fmt.Sprintf("%s: %s (SQLSTATE %s)", e.op, e.msg, e.code)
}

// SQLState returns the SQLSTATE code.
func (e *sqlError) SQLState() string { return e.code }

// safeMessage returns the server's message unless it may quote the row:
// data exceptions (class 22) quote the offending value, and messages raised
// by user code (RAISE in a trigger: classes P0 and any custom code) can hold
// anything. The detail field, which quotes rows ("Failing row contains …"),
// is never used.
func safeMessage(e *pgconn.PgError) string {
	switch class := e.Code[:min(2, len(e.Code))]; class {
	case "08", "25", "28", "40", "42", "53", "55", "57", "58":
		msg := e.Message
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
		return msg
	case "23": // integrity: the message names the constraint, the detail quotes the row
		if e.ConstraintName != "" {
			return "violates constraint " + e.ConstraintName
		}
	}
	return ""
}

// redactConnectError drops what a connection error may say about the
// connection string. pgconn's ConnectError names the user and database but
// never the password; its cause is kept.
func redactConnectError(err error) error {
	if ce, ok := errors.AsType[*pgconn.ConnectError](err); ok {
		if cause := errors.Unwrap(ce); cause != nil {
			return fmt.Errorf("connect to the database: %w", cause)
		}
	}
	return err
}
