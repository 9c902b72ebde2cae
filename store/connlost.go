package store

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"
)

// ConnectionLost reports whether err says a statement's connection was
// lost or could not be made, rather than the statement refused: the server
// ended the session or does not accept connections yet (SQLSTATE class 08,
// 57P01 to 57P03), the connection broke, or pgx reports the statement
// unsent. A context's end is not one.
func ConnectionLost(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		c := pgErr.Code
		return len(c) == 5 && (c[:2] == "08" || c == "57P01" || c == "57P02" || c == "57P03")
	}
	var netErr net.Error
	var connErr *pgconn.ConnectError
	return errors.As(err, &connErr) || errors.As(err, &netErr) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || pgconn.SafeToRetry(err) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, pgconn.ErrConnClosed)
}
