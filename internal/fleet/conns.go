package fleet

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// OpenCoordination returns the pool of one connection to the coordination
// database at url (it connects on first use). Its statements are sent
// without a prepare round trip (QueryExecModeExec): a batch is one
// pipeline, so the publication's lock_timeout is set before its statements
// are parsed (parsing one already waits on a lock held on its table). When
// resolve is set, each new connection reads the url from it first (a
// rotated credentials file is picked up when the connection is replaced);
// a url that does not resolve or parse keeps the last one.
func OpenCoordination(url string, resolve func() (string, error)) (*pgxpool.Pool, error) {
	pc, err := coordinationConfig(url)
	if err != nil {
		return nil, err
	}
	if resolve != nil {
		pc.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
			if u, err := resolve(); err == nil {
				if fresh, err := coordinationConfig(u); err == nil {
					cc.Config = fresh.ConnConfig.Config
				}
			}
			return nil
		}
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return nil, fmt.Errorf("fleet coordination database: %s", redact(err))
	}
	return pool, nil
}

func coordinationConfig(url string) (*pgxpool.Config, error) {
	pc, err := poolConfig(url, 1)
	if err != nil {
		return nil, fmt.Errorf("fleet coordination database: %w", err)
	}
	pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	return pc, nil
}

// poolConfig parses url into a pool of at most conns connections.
func poolConfig(url string, conns int32) (*pgxpool.Config, error) {
	pc, err := config.ParseDatabaseURL(url)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	pc.MaxConns, pc.MinConns = conns, 0
	store.SessionDefaults(pc.ConnConfig)
	pc.ConnConfig.DialFunc = dialAwaitingClose(pc.ConnConfig.DialFunc)
	return pc, nil
}

// closeWait bounds how long closing a connection waits for the server to
// close its end.
const closeWait = 5 * time.Second

// dialAwaitingClose wraps dial so that closing a connection returns once
// the server has closed its end, its backend gone (or after closeWait): a
// pool's Close then returns once its connections are gone from the server,
// not merely sent their Terminate, so that a database let go is released,
// and another replica opens its pool, only once they are.
func dialAwaitingClose(dial pgconn.DialFunc) pgconn.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return awaitedConn{c}, nil
	}
}

// awaitedConn is a connection whose Close waits for the server's end of it.
type awaitedConn struct{ net.Conn }

func (c awaitedConn) Close() error {
	if hc, ok := c.Conn.(interface{ CloseWrite() error }); ok && hc.CloseWrite() == nil {
		if c.Conn.SetReadDeadline(time.Now().Add(closeWait)) == nil {
			_, _ = io.Copy(io.Discard, c.Conn) // until the server closes: EOF
		}
	}
	return c.Conn.Close()
}

// redact keeps an error's text but drops anything that looks like a password.
func redact(err error) string {
	if err == nil {
		return ""
	}
	msg := store.PoolerHint(err).Error()
	if i := strings.Index(msg, "password="); i >= 0 {
		msg = msg[:i] + "password=<redacted>"
	}
	return msg
}

// sleep waits for d or until ctx is done; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
