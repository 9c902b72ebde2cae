package store

import (
	"context"
	"errors"
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
	return collect[BrokenLink](ctx, db, s.sql(`
	WITH chain AS (
	    SELECT a.*, coalesce(lag(a.hash) OVER (ORDER BY a.id),
	                         (SELECT x.hash FROM {s}.audit_anchors x WHERE x.key = a.key)) AS expected_prev
	      FROM {s}.audit a WHERE a.key = $1
	)
	SELECT c.id, c.key,
	       CASE WHEN c.hash IS DISTINCT FROM {s}.audit_hash(c.prev_hash, c.key, c.at, c.event, c.from_status,
	                  c.to_status, c.attempts, c.response_status, c.actor, c.reason, c.detail_sha256)
	            THEN 'entry content does not match its hash (edited)'
	            ELSE 'prev_hash does not match the previous entry of this key (an entry was removed or inserted)'
	       END AS problem
	  FROM chain c
	 WHERE c.hash IS DISTINCT FROM {s}.audit_hash(c.prev_hash, c.key, c.at, c.event, c.from_status,
	             c.to_status, c.attempts, c.response_status, c.actor, c.reason, c.detail_sha256)
	    OR c.prev_hash IS DISTINCT FROM c.expected_prev
	UNION ALL
	SELECT h.id, i.key,
	       CASE WHEN q.audit_head IS NOT NULL AND q.audit_head IS DISTINCT FROM coalesce(h.hash, x.hash)
	            THEN 'the row''s audit head is not its chain''s last entry (an entry was removed)'
	            ELSE format('the row is %s but its chain''s last entry records %s (a change was not recorded)',
	                        q.status, h.to_status)
	       END
	  FROM {s}.intents i
	  JOIN {s}.queue q ON q.seq = i.seq
	  LEFT JOIN LATERAL (SELECT a.id, a.hash, a.to_status FROM {s}.audit a
	                      WHERE a.key = i.key ORDER BY a.id DESC LIMIT 1) h ON true
	  LEFT JOIN {s}.audit_anchors x ON x.key = i.key
	 WHERE i.key = $1
	   AND ((q.audit_head IS NOT NULL AND q.audit_head IS DISTINCT FROM coalesce(h.hash, x.hash))
	        OR (h.id IS NOT NULL AND q.status IS DISTINCT FROM h.to_status
	            AND NOT (q.status = 'in_flight' AND h.to_status = 'pending')))
	 ORDER BY 1`), key)
}

// ToolCount is the number of rows of one tool in one status.
type ToolCount struct {
	Tool   string `json:"tool_name" db:"tool_name"`
	Status string `json:"status" db:"status"`
	Rows   int64  `json:"rows" db:"rows"`
}

// CountsByTool counts the rows that hold work (pending, in_flight,
// outcome_unknown, compensation_failed) by tool and status, through the
// status indexes.
func (s *Store) CountsByTool(ctx context.Context, db DB) ([]ToolCount, error) {
	return collect[ToolCount](ctx, db, s.sql(`SELECT tool_name, status, count(*) AS rows FROM {s}.outbox
	    WHERE status IN ('pending', 'outcome_unknown', 'compensation_failed')
	    GROUP BY tool_name, status
	    UNION ALL
	    SELECT tool_name, status, count(*) FROM {s}.outbox WHERE status = 'in_flight'
	    GROUP BY tool_name, status
	    ORDER BY 1, 2`))
}
