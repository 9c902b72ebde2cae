package store

import (
	"context"
	"errors"
	"fmt"
	"github.com/drainer-io/drainer/outbox"
	"time"

	"github.com/jackc/pgx/v5"
)

// The statements of the operator console (internal/console): what its pages
// show beyond the operator commands' reads.

// RowFloor returns the not_before floor of the row of key (the earliest
// moment the provider allows its next attempt), nil when it has none.
func (s *Store) RowFloor(ctx context.Context, db DB, key string) (*time.Time, error) {
	var nb *time.Time
	err := db.QueryRow(ctx, s.sql(`SELECT not_before FROM {s}.outbox WHERE key = $1`), key).Scan(&nb)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return nb, err
}

// VerifyAuditKey checks the hash chain of one key, and that its row stands
// where the chain ends (as audit_verify does for every chain), and returns
// its broken links, first first.
func (s *Store) VerifyAuditKey(ctx context.Context, db DB, key string) ([]BrokenLink, error) {
	return collect[BrokenLink](ctx, db, s.sql(`SELECT id, key, problem FROM {s}.audit_problems($1) ORDER BY id`), key)
}

// ToolCount is the number of rows of one tool in one status.
type ToolCount struct {
	Tool   string        `json:"tool_name" db:"tool_name"`
	Status outbox.Status `json:"status" db:"status"`
	Rows   int64         `json:"rows" db:"rows"`
}

// CountsByTool counts the rows that hold work (pending, in_flight,
// outcome_unknown, compensation_failed) by tool and status, through the
// status indexes of the queue alone (tool and status are on its rows: the
// outbox view would join every counted row to its intent).
func (s *Store) CountsByTool(ctx context.Context, db DB) ([]ToolCount, error) {
	return collect[ToolCount](ctx, db, s.sql(`SELECT tool_name, status, count(*) AS rows FROM {s}.queue
	    WHERE status IN ({StatusPending}, {StatusOutcomeUnknown}, {StatusCompensationFailed})
	    GROUP BY tool_name, status
	    UNION ALL
	    SELECT tool_name, status, count(*) FROM {s}.queue WHERE status = {StatusInFlight}
	    GROUP BY tool_name, status
	    ORDER BY 1, 2`))
}

// viewKeysSQL reads the keys of the rows matching a filter (%s) in seq
// order.
const viewKeysSQL = `SELECT o.key FROM {s}.outbox o WHERE %s ORDER BY o.seq LIMIT $1`

// ViewKeys returns the keys of the first limit rows matching f in seq
// order: the rows a console view holds, which its bulk actions act on.
func (s *Store) ViewKeys(ctx context.Context, db DB, f Filter, limit int) ([]string, error) {
	args := []any{limit}
	return keysOf(db.Query(ctx, s.sql(fmt.Sprintf(viewKeysSQL, f.where(&args))), args...))
}
