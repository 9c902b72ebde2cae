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

// workByToolSQL counts the rows that hold work (pending, in_flight,
// outcome_unknown, compensation_failed) by tool and status, through the
// status indexes of the queue alone (tool and status are on its rows: the
// outbox view would join every counted row to its intent).
const workByToolSQL = `SELECT tool_name, status, count(*) AS rows FROM {s}.queue
	    WHERE status IN ({StatusPending}, {StatusOutcomeUnknown}, {StatusCompensationFailed})
	    GROUP BY tool_name, status
	    UNION ALL
	    SELECT tool_name, status, count(*) FROM {s}.queue WHERE status = {StatusInFlight}
	    GROUP BY tool_name, status`

// CountsByTool counts the rows that hold work by tool and status, every
// tool (`drainer stats`). The console reads CountsByTopTools: producers
// name tools freely, so their number has no bound.
func (s *Store) CountsByTool(ctx context.Context, db DB) ([]ToolCount, error) {
	return collect[ToolCount](ctx, db, s.sql(workByToolSQL+` ORDER BY 1, 2`))
}

// ToolCounts is the work by tool, bounded: the tools with the most rows
// named, the others summed.
type ToolCounts struct {
	// Top are the rows of the tools with the most rows that hold work, by
	// tool and status, in tool then status order.
	Top []ToolCount
	// Tools is how many tools hold work: Top's and the others.
	Tools int64
	// Other counts the rows of the tools left out of Top, by status.
	Other map[outbox.Status]int64
}

// countsByTopToolsSQL ranks the tools by their work rows (ties by name)
// and names the first $1; the others' rows are summed by status under a
// null tool_name. tools counts every tool with work.
const countsByTopToolsSQL = `WITH c AS (` + workByToolSQL + `),
	t AS (SELECT tool_name, row_number() OVER (ORDER BY sum(rows) DESC, tool_name) AS rank FROM c GROUP BY tool_name)
	SELECT CASE WHEN t.rank <= $1 THEN c.tool_name END AS tool_name, c.status, sum(c.rows)::bigint AS rows,
	       (SELECT count(*) FROM t) AS tools
	  FROM c JOIN t USING (tool_name)
	 GROUP BY 1, 2
	 ORDER BY 1 NULLS LAST, 2`

// CountsByTopTools counts the rows that hold work by tool and status for
// the n tools with the most of them, and sums the others' by status: a
// result of at most 4·(n+1) rows however many tools producers name.
func (s *Store) CountsByTopTools(ctx context.Context, db DB, n int) (ToolCounts, error) {
	out := ToolCounts{Top: []ToolCount{}, Other: map[outbox.Status]int64{}}
	rows, err := db.Query(ctx, s.sql(countsByTopToolsSQL), n)
	if err != nil {
		return out, err
	}
	defer rows.Close()
	for rows.Next() {
		var tool *string
		var tc ToolCount
		if err := rows.Scan(&tool, &tc.Status, &tc.Rows, &out.Tools); err != nil {
			return out, err
		}
		if tool == nil {
			out.Other[tc.Status] += tc.Rows
			continue
		}
		tc.Tool = *tool
		out.Top = append(out.Top, tc)
	}
	return out, rows.Err()
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
