package drainer

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgxRow is a single-row result.
type pgxRow = pgx.Row

// connRow adapts a pool connection to the QueryRow interface.
type connRow struct{ c *pgxpool.Conn }

func (c connRow) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return c.c.QueryRow(ctx, sql, args...)
}
