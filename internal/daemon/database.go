package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// closePool closes the daemon's pool at exit, waiting at most
// poolCloseWait: a connection held by a statement the server does not
// answer is left behind, so the process ends within its grace
// (store.ClosePool).
func closePool(p *pgxpool.Pool, log *slog.Logger) {
	if !store.ClosePool(p, poolCloseWait) {
		log.Warn("database connections still in use at exit: their statements were not answered; the process ends without them",
			"waited", poolCloseWait)
	}
}

// poolCloseWait bounds closePool.
const poolCloseWait = 2 * time.Second

// connect opens the pool, retrying with backoff while the database is
// unreachable, until ctx is cancelled. With reread (database_url from the
// config file), each new connection reads the url's references again and
// takes its user and password: rotated credentials reach the pool, the
// listeners and the gateway without a restart.
func connect(ctx context.Context, url string, workers int, log *slog.Logger, reread func() (config.Secret, error), unreachable func()) (*pgxpool.Pool, error) {
	pc, err := config.ParseDatabaseURL(url)
	if err != nil {
		return nil, &ConfigError{err}
	}
	pc.MaxConns = poolMaxConns(url, pc.MaxConns, workers)
	store.SessionDefaults(pc.ConnConfig)
	if reread != nil {
		pc.BeforeConnect = (&credentials{reread: reread, log: log,
			user: pc.ConnConfig.User, password: pc.ConnConfig.Password,
			host: pc.ConnConfig.Host, database: pc.ConnConfig.Database}).apply
	}
	delay := 500 * time.Millisecond
	for {
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err == nil {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err = pool.Ping(pctx)
			cancel()
			if err == nil {
				return pool, nil
			}
			pool.Close()
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		unreachable()
		log.Error("database unreachable; retrying", "host", pc.ConnConfig.Host, "port", pc.ConnConfig.Port,
			"database", pc.ConnConfig.Database, "err", redactDSNError(store.PoolerHint(err)), "retry_in", delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		delay = min(delay*2, 30*time.Second)
	}
}

// poolMaxConns is the pool's size: the URL's pool_max_conns when it sets
// one (parsed, its value given), else what the workers need, at most 64.
// A URL sized for a small shared server is obeyed: the drain waits for a
// connection rather than exhausting the server's.
func poolMaxConns(url string, parsed int32, workers int) int32 {
	if strings.Contains(url, "pool_max_conns") {
		return parsed
	}
	return int32(min(workers/4+8, 64))
}

// credentials gives each new connection the user and password that
// database_url names now. A url that cannot be read or parsed keeps the
// last credentials (logged once per distinct failure); a changed host or
// database is logged and ignored: those take a restart.
type credentials struct {
	reread func() (config.Secret, error)
	log    *slog.Logger

	mu                             sync.Mutex
	user, password, host, database string
	failed                         string // the last failure logged
}

func (c *credentials) apply(_ context.Context, cc *pgx.ConnConfig) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	fresh, err := c.reread()
	var parsed *pgx.ConnConfig
	if err == nil {
		if parsed, err = pgx.ParseConfig(fresh.Reveal()); err != nil {
			err = fmt.Errorf("database_url: %s", redactDSNError(err))
		}
	}
	if err != nil {
		if msg := err.Error(); msg != c.failed {
			c.failed = msg
			c.log.Warn("database_url cannot be read again; new connections keep the last credentials", "err", msg)
		}
	} else {
		c.failed = ""
		if parsed.User != c.user || parsed.Password != c.password {
			c.log.Info("database credentials changed: new connections use them", "user", parsed.User)
			c.user, c.password = parsed.User, parsed.Password
		}
		if parsed.Host != c.host || parsed.Database != c.database {
			c.log.Warn("database_url now names another host or database: that takes a restart; new connections keep the running one")
			c.host, c.database = parsed.Host, parsed.Database
		}
	}
	cc.User, cc.Password = c.user, c.password
	return nil
}

// redactDSNError keeps a connection error but drops anything that looks like
// a password from it.
func redactDSNError(err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	if i := strings.Index(msg, "password="); i >= 0 {
		msg = msg[:i] + "password=<redacted>"
	}
	return msg
}
