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

// lazyPools are the pools of Pool, one per database asked for. A pool with
// MinConns 0 holds no connection until it is used, and closes its
// connection once unused for idle: kept in the map, it costs nothing on
// the server. A pool is closed when its database leaves the list or its
// url changes, and all of them when Run returns.
type lazyPools struct {
	idle time.Duration

	mu     sync.Mutex
	urls   map[string]string // the list, by name (nil before the first)
	pools  map[string]*lazyPool
	closed bool
}

type lazyPool struct {
	url  string
	pool *pgxpool.Pool
}

// keep records the list: pools of databases gone or moved are closed.
func (l *lazyPools) keep(dbs []Database) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.urls = make(map[string]string, len(dbs))
	for _, db := range dbs {
		l.urls[db.Name] = db.URL
	}
	for name, p := range l.pools {
		if l.urls[name] != p.url {
			p.pool.Close()
			delete(l.pools, name)
		}
	}
}

func (l *lazyPools) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.pools {
		p.pool.Close()
	}
	l.pools, l.closed = nil, true
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
		return nil, errors.New("fleet: stopped")
	}
	url, ok := l.urls[name]
	if !ok {
		return nil, &UnknownDatabaseError{Name: name}
	}
	if p := l.pools[name]; p != nil {
		return p.pool, nil
	}
	pc, err := poolConfig(url, 1)
	if err != nil {
		return nil, fmt.Errorf("database %s: %w", name, err)
	}
	if pc.ConnConfig.RuntimeParams["application_name"] == "drainer" {
		// Told apart from the engines' in pg_stat_activity.
		pc.ConnConfig.RuntimeParams["application_name"] = "drainer console"
	}
	pc.MaxConnIdleTime = l.idle
	pc.HealthCheckPeriod = max(min(l.idle/2, time.Minute), 100*time.Millisecond)
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return nil, fmt.Errorf("database %s: %s", name, redact(err))
	}
	if l.pools == nil {
		l.pools = map[string]*lazyPool{}
	}
	l.pools[name] = &lazyPool{url: url, pool: pool}
	return pool, nil
}
