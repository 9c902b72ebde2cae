package pgreach

import (
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// Unreachable reports whether err says the server could not be reached, or
// cannot take a connection yet: no connection could be made or kept (a
// refused or reset connection, a timeout, a host name that does not
// resolve), or the server answered that it is starting, shutting down or
// full (SQLSTATE class 08, 57P01 to 57P03, 53300). A refusal is not: bad
// credentials (class 28), a database that does not exist (3D000), a TLS
// certificate or alert, or any other answer.
func Unreachable(err error) bool {
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		c := pgErr.Code
		return strings.HasPrefix(c, "08") || c == "57P01" || c == "57P02" || c == "57P03" || c == "53300"
	}
	if opErr, ok := errors.AsType[*net.OpError](err); ok && (opErr.Op == "remote error" || opErr.Op == "local error") {
		return false // a TLS alert: the server answered
	}
	_, netErr := errors.AsType[net.Error](err) // a dial error, a timeout (context.DeadlineExceeded too)
	return netErr || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED)
}

// Missing reports whether SQLSTATE code says a statement's table or its
// schema does not exist (42P01 undefined_table, 3F000 invalid_schema_name).
// The adapters checked their tables at start, so after it this is someone
// having dropped or renamed them: a problem of the whole adapter, not of
// the row, which waits (no attempt consumed) until they are back.
func Missing(code string) bool { return code == "42P01" || code == "3F000" }
