package daemon

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// warnNoVacuum logs, once at start, when the rows retention deletes can
// never be vacuumed away: autovacuum off on the server, or on one of the
// schema's tables. Nothing fails then at first; the tables and indexes
// grow, and claims and scans slow down over days, with no error to say
// why. A setting that cannot be read is not a reason to stop.
func warnNoVacuum(ctx context.Context, pool *pgxpool.Pool, schema string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var server string
	var tables []string
	err := pool.QueryRow(ctx, `SELECT current_setting('autovacuum'),
		coalesce((SELECT array_agg(c.relname::text ORDER BY c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		  WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND 'autovacuum_enabled=false' = ANY (c.reloptions)), '{}')`,
		schema).Scan(&server, &tables)
	if err != nil {
		log.Debug("autovacuum settings could not be read", "err", err)
		return
	}
	if server == "off" {
		log.Warn("autovacuum is off on this server: the rows retention deletes are never vacuumed, so the schema's tables and indexes grow and claims slow down; turn autovacuum on, or VACUUM the schema's tables on a schedule",
			"schema", schema)
	}
	if len(tables) > 0 {
		log.Warn("autovacuum is off for tables of the schema (autovacuum_enabled = false): the rows retention deletes from them are never vacuumed; reset it with ALTER TABLE … RESET (autovacuum_enabled)",
			"schema", schema, "tables", strings.Join(tables, ", "))
	}
}
