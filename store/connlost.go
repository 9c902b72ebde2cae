package store

import (
	"context"
	"errors"
	"io"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
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

// ClosePool closes pool, waiting at most within for it: pgxpool's Close
// waits until every connection in use is given back, and one held by a
// statement on a connection the server no longer answers (a silent
// network, a frozen server) is given back only when that statement's own
// timeout ends it. Past within, ClosePool returns false and leaves the rest
// of the closing to a goroutine of its own: a process that is stopping ends
// within its grace whatever the database does (docs/reliability.md,
// "Shutdown ends within its grace and a few seconds").
func ClosePool(pool *pgxpool.Pool, within time.Duration) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		pool.Close()
	}()
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}
