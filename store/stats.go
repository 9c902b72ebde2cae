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

// oldestPendingSQL finds each tool's oldest due pending row: its first
// in the due index's order (next_attempt_at, seq). It walks the tools
// with open rows (tools: one descent of every generation's scope index
// per tool, as unroutedSQL does), then the due index from its start, each
// step to the next due row of a tool not met yet (walk), and stops once
// every such tool was met. A tool with open rows but none due (paused,
// deferred, in flight) has the walk read every due row, and no more.
// Before, every row of the queue was read (a pass over the table, which
// statistics taken while a generation's rows were pending and due make
// the cheapest): 0.26 s at 10^6 rows for 100 due ones.
const oldestPendingSQL = openToolsSQL + `
, open AS (
    SELECT coalesce(array_agg(tool_name), '{}') AS tools FROM tools WHERE tool_name IS NOT NULL
), walk(tool_name, due, seq, met) AS (
    (SELECT q.tool_name, q.next_attempt_at, q.seq, ARRAY[q.tool_name] FROM {s}.queue q
      WHERE q.status = {StatusPending} AND q.next_attempt_at <= now()
      ORDER BY q.next_attempt_at, q.seq LIMIT 1)
  UNION ALL
    SELECT n.tool_name, n.next_attempt_at, n.seq, w.met || n.tool_name
      FROM walk w
     CROSS JOIN LATERAL (
            SELECT q.tool_name, q.next_attempt_at, q.seq FROM {s}.queue q
             WHERE q.status = {StatusPending} AND q.next_attempt_at <= now()
               AND (q.next_attempt_at, q.seq) > (w.due, w.seq) AND q.tool_name <> ALL (w.met)
             ORDER BY q.next_attempt_at, q.seq LIMIT 1) n
     WHERE NOT ((SELECT tools FROM open) <@ w.met)
)
SELECT tool_name, extract(epoch FROM now() - due)::float8 AS age FROM walk ORDER BY tool_name`

// openToolsSQL starts a statement with the CTE tools(tool_name): the
// tools with open rows (pending or in flight), in name order, then a NULL.
// It walks the tools, not the rows: each step is one descent of every
// generation's scope index (tool_name first, over open rows) to the first
// tool past the last.
const openToolsSQL = `
WITH RECURSIVE tools(tool_name) AS (
    (SELECT tool_name FROM {s}.queue
      WHERE status IN ({StatusPending}, {StatusInFlight})
      ORDER BY tool_name LIMIT 1)
  UNION ALL
    SELECT (SELECT q.tool_name FROM {s}.queue q
             WHERE q.status IN ({StatusPending}, {StatusInFlight}) AND q.tool_name > t.tool_name
             ORDER BY q.tool_name LIMIT 1)
      FROM tools t WHERE t.tool_name IS NOT NULL)`

// indexPlanSettings pin the plan of openToolsSQL's statements, whatever
// the statistics say (taken while a generation filled, they make a pass
// over every row look cheapest): with no pass over a table, no bitmap, no
// sort and no hash or merge join, each step reads the index its ORDER BY
// names, in that order, and joins by seq. A plan of disabled costs is not
// compiled (jit).
const indexPlanSettings = `SELECT set_config('enable_seqscan', 'off', true),
       set_config('enable_bitmapscan', 'off', true),
       set_config('enable_sort', 'off', true),
       set_config('enable_hashjoin', 'off', true),
       set_config('enable_mergejoin', 'off', true),
       set_config('jit', 'off', true)`

// OldestPendingByTool returns, for each tool with due pending rows,
// now() - min(next_attempt_at) over them (the definition of
// drainer_outbox_oldest_pending_age_seconds, per tool), through the
// scope and due indexes (oldestPendingSQL); tools in name order.
func (s *Store) OldestPendingByTool(ctx context.Context, db DB) ([]ToolAge, error) {
	var ages []ToolAge
	err := withSettings(ctx, db, indexPlanSettings, func(db DB) error {
		var err error
		ages, err = collect[ToolAge](ctx, db, s.sql(oldestPendingSQL))
		return err
	})
	return ages, err
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
