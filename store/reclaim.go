package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// reclaimSQL returns rows whose lease expired (their worker died or hung) to
// pending, or to outcome_unknown on non_idempotent routes. The attempt
// counted at claim stays consumed: the request may have reached the
// provider. next_attempt_at = now() stops at the row's not_before floor.
const reclaimSQL = `
WITH expired AS MATERIALIZED (
    SELECT seq FROM {s}.outbox
     WHERE status = 'in_flight' AND lease_expires_at < now()
     ORDER BY lease_expires_at
     LIMIT $2
     FOR UPDATE SKIP LOCKED
)
UPDATE {s}.outbox o
   SET status = CASE WHEN o.tool_name = ANY($1::text[]) THEN 'outcome_unknown' ELSE 'pending' END,
       last_error = format('lease of %s expired during attempt %s: the worker was lost mid-call; the attempt counts%s',
                           o.leased_by, o.attempts,
                           CASE WHEN o.tool_name = ANY($1::text[])
                                THEN ' and the route is non_idempotent: resolve with drainer resolve' ELSE '' END),
       lease_token = NULL,
       lease_expires_at = NULL,
       leased_by = NULL,
       next_attempt_at = now(),
       updated_at = now()
  FROM expired
 WHERE o.seq = expired.seq
RETURNING o.seq`

// ReclaimBatch bounds the rows one reclaim statement takes back.
const ReclaimBatch = 1000

// Reclaim takes back up to ReclaimBatch rows whose lease expired and returns
// how many; rows of the tools in nonIdempotent park as outcome_unknown.
func (s *Store) Reclaim(ctx context.Context, db DB, nonIdempotent []string) (int, error) {
	rows, err := db.Query(ctx, s.sql(reclaimSQL), pgx.QueryExecModeExec, nonNil(nonIdempotent), ReclaimBatch)
	if err != nil {
		return 0, fmt.Errorf("reclaim expired leases: %w", err)
	}
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, fmt.Errorf("reclaim expired leases: %w", err)
	}
	return len(seqs), nil
}

// stillLeasedSQL counts the rows of (seq, token) pairs that are still
// in_flight under that lease token.
const stillLeasedSQL = `
SELECT count(*)
  FROM {s}.outbox o
  JOIN unnest($1::bigint[], $2::uuid[]) AS u(seq, token) ON o.seq = u.seq AND o.lease_token = u.token
 WHERE o.status = 'in_flight'`

// StillLeased counts how many of the rows seqs[i], leased under tokens[i],
// are still in_flight under that lease: the completions a replica could not
// write that nobody has settled since (another replica's reclaim, an
// operator, or a late write).
func (s *Store) StillLeased(ctx context.Context, db DB, seqs []int64, tokens []pgtype.UUID) (int, error) {
	var n int
	if err := db.QueryRow(ctx, s.sql(stillLeasedSQL), seqs, tokens).Scan(&n); err != nil {
		return 0, fmt.Errorf("count rows still leased: %w", err)
	}
	return n, nil
}
