package gateway

import (
	"context"
	"sync"

	"github.com/drainer-io/drainer/store"
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
	if !store.ConnectionLost(err) || ctx.Err() != nil {
		return false, err
	}
	g.log.Info("gateway: a connection was lost; running the statement again on a live one", "err", err)
	g.sweep.run(ctx, g.cfg.DB)
	return true, fn(g.cfg.DB)
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
