package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/jackc/pgx/v5/pgxpool"
)

// connect opens the pool, retrying with backoff while the database is
// unreachable, until ctx is cancelled.
func connect(ctx context.Context, url string, workers int, log *slog.Logger) (*pgxpool.Pool, error) {
	if err := config.CheckDatabaseURL(url); err != nil {
		return nil, &ConfigError{err}
	}
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, &ConfigError{fmt.Errorf("database URL: %s", redactDSNError(err))}
	}
	pc.MaxConns = int32(min(workers/4+8, 64))
	if pc.ConnConfig.RuntimeParams == nil {
		pc.ConnConfig.RuntimeParams = map[string]string{}
	}
	if pc.ConnConfig.RuntimeParams["application_name"] == "" {
		pc.ConnConfig.RuntimeParams["application_name"] = "drainer"
	}
	if pc.ConnConfig.RuntimeParams["jit"] == "" {
		// Short statements over a few hundred rows: compiling them (once an
		// estimate crosses jit_above_cost) costs more than running them.
		pc.ConnConfig.RuntimeParams["jit"] = "off"
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
		log.Error("database unreachable; retrying", "host", pc.ConnConfig.Host, "port", pc.ConnConfig.Port,
			"database", pc.ConnConfig.Database, "err", redactDSNError(err), "retry_in", delay)
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
