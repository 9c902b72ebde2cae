package gateway

import (
	"context"
	"time"

	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/singleflight"
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

// sweeper checks a pool's idle connections, one sweep at a time: a call
// that loses its connection while another sweeps waits for that sweep
// (within its context), then runs again on what it left.
type sweeper struct {
	group singleflight.Group
}

// sweepTimeout bounds a sweep: a server that does not answer (a network
// partition) holds it, and the calls waiting for it, no longer than that.
const sweepTimeout = time.Second

// run pings every idle connection of pool: one the server ended fails its
// ping, is closed by it, and leaves the pool on release. A connection lost
// in the sweep's own read does no harm: the statement after it takes
// another. The sweep is shared by every call that asks while it runs, so
// it does not end with the context of the call that started it; each
// caller stops waiting when its own context ends.
func (s *sweeper) run(ctx context.Context, pool *pgxpool.Pool) {
	done := s.group.DoChan("sweep", func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sweepTimeout)
		defer cancel()
		for _, c := range pool.AcquireAllIdle(ctx) {
			_ = c.Ping(ctx)
			c.Release()
		}
		return nil, nil
	})
	select {
	case <-done:
	case <-ctx.Done():
	}
}
