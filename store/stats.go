package store

import (
	"context"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/jackc/pgx/v5"
)

// The statements of `drainer stats` beyond the console's (CountsByTool)
// and the snapshot's (countStatuses): each reads through an index of the
// queue, never the whole table.

// CountStatuses counts the rows by status now, as the backlog snapshot
// does: the statuses that hold work exactly, the terminal ones exactly
// unless the queue is past ExactCountLimit rows, when they are planner
// estimates (returned as estimated).
func (s *Store) CountStatuses(ctx context.Context, tx pgx.Tx) (counts map[outbox.Status]int64, estimated []outbox.Status, err error) {
	table := s.schema + ".queue"
	reltuples, err := queueSize(ctx, tx, table)
	if err != nil {
		return nil, nil, err
	}
	return s.countStatuses(ctx, tx, table, reltuples >= ExactCountLimit)
}

// ToolAge is how late the oldest due pending row of one tool is.
type ToolAge struct {
	Tool       string  `json:"tool_name" db:"tool_name"`
	AgeSeconds float64 `json:"oldest_pending_age_seconds" db:"age"`
}

// OldestPendingByTool returns, for each tool with due pending rows,
// now() - min(next_attempt_at) over them (the definition of
// drainer_outbox_oldest_pending_age_seconds, per tool), through the due
// index; tools in name order.
func (s *Store) OldestPendingByTool(ctx context.Context, db DB) ([]ToolAge, error) {
	return collect[ToolAge](ctx, db, s.sql(`SELECT tool_name, extract(epoch FROM now() - min(next_attempt_at))::float8 AS age
	      FROM {s}.queue WHERE status = {StatusPending} AND next_attempt_at <= now()
	     GROUP BY tool_name ORDER BY tool_name`))
}

// SettledStatuses are the statuses a row leaves the drain in: the terminal
// ones and the parked ones.
var SettledStatuses = []outbox.Status{
	outbox.StatusSucceeded, outbox.StatusFailed, outbox.StatusOutcomeUnknown,
	outbox.StatusCompensated, outbox.StatusCompensationFailed, outbox.StatusCancelled,
}

// SettledSince counts, by status, the rows of SettledStatuses whose last
// change (updated_at) is less than window ago by the database clock: the
// rows settled in that window. It reads a range of the status index per
// status, so its cost follows the rows settled in the window, not the
// table's size.
func (s *Store) SettledSince(ctx context.Context, db DB, window time.Duration) (map[outbox.Status]int64, error) {
	rows, err := db.Query(ctx, s.sql(`SELECT status, count(*) FROM {s}.queue
	     WHERE status = ANY($1) AND updated_at > now() - $2 * interval '1 millisecond'
	     GROUP BY status`), outbox.StatusStrings(SettledStatuses...), window.Milliseconds())
	if err != nil {
		return nil, err
	}
	out := map[outbox.Status]int64{}
	var status outbox.Status
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&status, &n}, func() error { out[status] = n; return nil }); err != nil {
		return nil, err
	}
	return out, nil
}
