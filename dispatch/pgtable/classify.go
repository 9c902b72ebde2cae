package pgtable

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/internal/pgreach"
)

// Reasons set by the adapter besides the dispatch.Reason* ones it shares
// (replay, payload_mismatch, connect, timeout, connection, cancelled): a
// small fixed set, safe as a metric label.
const (
	ReasonInserted        = "inserted"         // the row was inserted
	ReasonTxConflict      = "tx_conflict"      // 40001, 40P01, 55P03: retry
	ReasonUnavailable     = "db_unavailable"   // 08, 57P0x, 53, 58, 25006: retry
	ReasonStatementCancel = "statement_cancel" // 57014 without our deadline (statement_timeout)
	ReasonSchema          = "schema"           // 42: an undefined column, a syntax error (42501, a missing privilege: dispatch.ReasonAuth)
	ReasonConstraint      = "constraint"       // 23 (other than the key conflict): a check, a foreign key
	ReasonData            = "data"             // 22: the payload is not jsonb-storable, a value too long
	ReasonSQL             = "sql_error"        // any other SQLSTATE
	ReasonConflictGone    = "conflict_gone"    // the conflicting row vanished before it could be compared
)

// Error is the redacted error of a statement the server refused: the
// SQLSTATE and the primary message only. The detail, hint and context
// fields are left out: Postgres puts row values (the payload) there.
type Error struct {
	Op      string // insert, compare
	Code    string // SQLSTATE
	Message string
}

// Error returns e.g. "postgres insert: SQLSTATE 23514: new row for relation
// "effects" violates check constraint "amount_positive"".
func (e *Error) Error() string {
	return "postgres " + e.Op + ": SQLSTATE " + e.Code + ": " + e.Message
}

// classifySQLState maps a SQLSTATE to an outcome: retry what a later attempt
// can get past (conflicts, an unavailable or overloaded server, a failover
// to a standby), terminal for the rest.
func classifySQLState(code string) (dispatch.Outcome, string) {
	switch {
	case code == "40001", code == "40P01", code == "55P03":
		return dispatch.Retry, ReasonTxConflict
	case strings.HasPrefix(code, "08"), code == "57P01", code == "57P02", code == "57P03", code == "57P05",
		strings.HasPrefix(code, "53"), strings.HasPrefix(code, "58"), code == "25006":
		return dispatch.Retry, ReasonUnavailable
	case code == "57014":
		return dispatch.Retry, ReasonStatementCancel
	case strings.HasPrefix(code, "28"), code == "42501":
		// Bad credentials, a privilege revoked: the adapter is broken, not
		// the row (every row would be refused alike): held, no attempt
		// consumed, as the river adapter does.
		return dispatch.Auth, dispatch.ReasonAuth
	case strings.HasPrefix(code, "42"):
		return dispatch.Terminal, ReasonSchema
	case strings.HasPrefix(code, "23"):
		return dispatch.Terminal, ReasonConstraint
	case strings.HasPrefix(code, "22"):
		return dispatch.Terminal, ReasonData
	}
	return dispatch.Terminal, ReasonSQL
}

// classifyError classifies the error of statement op, run with ctx (the
// attempt's context, before its cancel func is called).
//
//   - The server refused it (*pgconn.PgError): the autocommitted statement
//     rolled back, so nothing happened: Refused (the server answered, so
//     the attempt counts), outcome by SQLSTATE. A
//     57014 that answers our own cancel request (the deadline passed or the
//     caller cancelled) is Retry with reason timeout or cancelled.
//   - pgconn reports it unsent (pgconn.SafeToRetry): Retry, NotSent.
//   - Otherwise the statement may have committed without its answer
//     reaching us (a deadline with no confirmed cancel, a lost connection):
//     Ambiguous.
func classifyError(ctx context.Context, op string, err error) dispatch.Result {
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		if pgreach.Missing(pgErr.Code) {
			// The table (or its schema) is gone: the start checked it, so
			// someone dropped or renamed it since. Every row would fail
			// alike; they wait, no attempt consumed, until it is back.
			return dispatch.Result{Outcome: dispatch.Retry, NotSent: true, AwaitsFix: true, Reason: dispatch.ReasonNotReady,
				Err: fmt.Errorf("%w; the row waits until it is back (no attempt consumed)", &Error{Op: op, Code: pgErr.Code, Message: pgErr.Message})}
		}
		outcome, reason := classifySQLState(pgErr.Code)
		if pgErr.Code == "57014" && ctx.Err() != nil {
			reason = ctxReason(ctx)
		}
		return dispatch.Result{Outcome: outcome, Refused: outcome != dispatch.Auth, Down: reason == ReasonUnavailable, Reason: reason,
			Err: &Error{Op: op, Code: pgErr.Code, Message: pgErr.Message}}
	}
	if pgconn.SafeToRetry(err) {
		return dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Reason: dispatch.ReasonConnect,
			Err: fmt.Errorf("postgres %s not sent: %w", op, err)}
	}
	r := dispatch.Result{Outcome: dispatch.Ambiguous, Reason: dispatch.ReasonConnection}
	if ctx.Err() != nil {
		r.Reason = ctxReason(ctx)
		r.Err = fmt.Errorf("postgres %s: no answer before the attempt ended: %w", op, err)
		return r
	}
	r.Err = fmt.Errorf("postgres %s: connection lost after the statement was sent: %w", op, err)
	return r
}

// notSent classifies an attempt given up before a statement was sent: a
// context already done, or no connection to be had.
func notSent(ctx context.Context, err error) dispatch.Result {
	r := dispatch.Result{Outcome: dispatch.Retry, NotSent: true, Reason: dispatch.ReasonConnect}
	if ctx.Err() != nil {
		r.Reason = ctxReason(ctx)
	}
	r.Err = fmt.Errorf("postgres: not sent: %w", err)
	return r
}

// ctxReason tells a deadline from a cancellation (shutdown).
func ctxReason(ctx context.Context) string {
	if errors.Is(ctx.Err(), context.Canceled) {
		return dispatch.ReasonCancelled
	}
	return dispatch.ReasonTimeout
}
