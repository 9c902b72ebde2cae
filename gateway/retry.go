package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"

	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The statements of a call that are safe to run again (the record, by
// its key: a second run of a committed enqueue finds the row; the reads;
// the wake-up) run again once when their connection was lost: the server
// ended it (a restart, a fail-over, pg_terminate_backend) or it broke.
// Every idle connection of the pool is checked first, so the second run
// does not take another one the same event ended: a pool whose
// connections were all ended answers the next call, not a call per dead
// connection.

// onLive runs fn on the pool, and once more after a sweep of its idle
// connections when fn failed because its connection was lost. retried
// says fn ran twice.
func (g *Gateway) onLive(ctx context.Context, fn func(db store.DB) error) (retried bool, err error) {
	err = fn(g.cfg.DB)
	if !lostConnection(err) || ctx.Err() != nil {
		return false, err
	}
	g.log.Info("gateway: a connection was lost; running the statement again on a live one", "err", err)
	g.sweep.run(ctx, g.cfg.DB)
	return true, fn(g.cfg.DB)
}

// lostConnection reports whether err says the statement's connection
// was lost rather than the statement refused: the server ended the
// session (57P01 to 57P03, class 08), the connection broke, or pgx
// reports the statement unsent. A context's end is not one.
func lostConnection(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		c := pgErr.Code
		return len(c) == 5 && (c[:2] == "08" || c == "57P01" || c == "57P02" || c == "57P03")
	}
	var netErr net.Error
	return pgconn.SafeToRetry(err) || errors.As(err, &netErr) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, pgconn.ErrConnClosed)
}

// sweeper checks a pool's idle connections, one sweep at a time: calls
// that lose their connections together wait for the one sweep under way.
type sweeper struct {
	mu sync.Mutex
}

// run pings every idle connection of pool: one the server ended fails its
// ping, is closed by it, and leaves the pool on release. A connection lost
// in the sweep's own read does no harm: the statement after it takes
// another.
func (s *sweeper) run(ctx context.Context, pool *pgxpool.Pool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range pool.AcquireAllIdle(ctx) {
		_ = c.Ping(ctx)
		c.Release()
	}
}
