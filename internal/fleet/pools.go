package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// UnknownDatabaseError is Pool naming a database the fleet does not list.
type UnknownDatabaseError struct{ Name string }

func (e *UnknownDatabaseError) Error() string {
	return fmt.Sprintf("unknown database %q: the fleet does not list it", e.Name)
}

// errStopped is Pool once Run has returned.
var errStopped = errors.New("fleet: stopped")

// lazyPools are the console's pools: one per database asked for (Pool).
// A pool with MinConns 0 holds no connection until it is used, and closes
// its connection once unused for idle: kept in the map, it costs nothing
// on the server. A pool is closed when its database leaves the list or its
// url changes, and all of them when Run returns. A pool is closed outside
// the lock and without waiting (pgxpool's Close waits for the connections
// a request still holds), so neither Run's loop nor another request ever
// waits on a request under way.
type lazyPools struct {
	idle time.Duration

	mu     sync.Mutex
	urls   map[string]string // the list, by name (nil before the first)
	pools  map[string]*lazyPool
	closed bool

	closing sync.WaitGroup // pools being closed
}

type lazyPool struct {
	url  string
	pool *pgxpool.Pool
}

// keep records the list: pools of databases gone or moved are closed in
// the background.
func (l *lazyPools) keep(dbs []Database) {
	l.mu.Lock()
	l.urls = make(map[string]string, len(dbs))
	for _, db := range dbs {
		l.urls[db.Name] = db.URL
	}
	var gone []*pgxpool.Pool
	for name, p := range l.pools {
		if l.urls[name] != p.url {
			gone = append(gone, p.pool)
			delete(l.pools, name)
		}
	}
	l.mu.Unlock()
	l.close(gone)
}

// close closes pools in the background: each once its connections are
// released.
func (l *lazyPools) close(pools []*pgxpool.Pool) {
	for _, p := range pools {
		l.closing.Go(p.Close)
	}
}

// closeAll closes every pool once Run is over (Pool refuses from then
// on), and waits for them up to grace: a pool that a request
// still uses after that closes when the request releases it.
func (l *lazyPools) closeAll(grace time.Duration) {
	l.mu.Lock()
	var all []*pgxpool.Pool
	for _, p := range l.pools {
		all = append(all, p.pool)
	}
	l.pools, l.closed = nil, true
	l.mu.Unlock()
	l.close(all)
	done := make(chan struct{})
	go func() {
		l.closing.Wait()
		close(done)
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// open returns a pool of at most one connection to url, opened on first
// use and closed after idle unused. Under l.mu (it does not connect).
func (l *lazyPools) open(url, app string) (*pgxpool.Pool, error) {
	pc, err := poolConfig(url, 1)
	if err != nil {
		return nil, err
	}
	if pc.ConnConfig.RuntimeParams["application_name"] == "drainer" {
		// Told apart from the engines' in pg_stat_activity.
		pc.ConnConfig.RuntimeParams["application_name"] = app
	}
	pc.MaxConnIdleTime = l.idle
	pc.HealthCheckPeriod = max(min(l.idle/2, time.Minute), 100*time.Millisecond)
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return nil, errors.New(redact(err))
	}
	return pool, nil
}

// Pool returns a pool of at most one connection to the named database, for
// reading it and acting on it beside its engine (the operator console). It
// is opened on first use and closes its connection after PoolIdle unused,
// so that a console nobody uses holds no connection to any database; it is
// independent of the engine's pool, so a page never waits behind the
// drain. An *UnknownDatabaseError when the name is not listed.
func (f *Fleet) Pool(name string) (*pgxpool.Pool, error) {
	l := &f.pools
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, errStopped
	}
	url, ok := l.urls[name]
	if !ok {
		return nil, &UnknownDatabaseError{Name: name}
	}
	if p := l.pools[name]; p != nil {
		return p.pool, nil
	}
	pool, err := l.open(url, "drainer console")
	if err != nil {
		return nil, fmt.Errorf("database %s: %w", name, err)
	}
	if l.pools == nil {
		l.pools = map[string]*lazyPool{}
	}
	l.pools[name] = &lazyPool{url: url, pool: pool}
	return pool, nil
}
