package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// reclaimSQL returns rows whose lease expired (their worker died or hung,
// or its replica lost the database) to pending, or to outcome_unknown on
// non_idempotent routes. The attempt counted at claim stays consumed: the
// request may have reached the provider.
//
// The provider may also have answered it, with a Retry-After that the lost
// worker never wrote: so the row's not_before floor is raised to its lease
// expiry plus the hold of its tool (the route's max_retry_after; see
// ReclaimPolicy), the latest moment such an answer could have asked for
// (the attempt ends before the lease). next_attempt_at = now() stops at that
// floor (schema trigger). The expired lease's token is kept in
// reclaimed_lease, so that the replica that held it can still write the
// answer it has (see completeSQL), which replaces this floor with the
// provider's own.
const reclaimSQL = `
WITH expired AS MATERIALIZED (
    SELECT seq, tool_name FROM {s}.queue
     WHERE status = 'in_flight' AND lease_expires_at < now()
     ORDER BY lease_expires_at
     LIMIT $2
     FOR UPDATE SKIP LOCKED
), held AS (
    SELECT e.seq, coalesce(x.ms, $5) AS ms
      FROM expired e
      LEFT JOIN unnest($3::text[], $4::bigint[]) AS x(tool, ms) ON x.tool = e.tool_name
)
UPDATE {s}.queue o
   SET status = CASE WHEN o.tool_name = ANY($1::text[]) THEN 'outcome_unknown' ELSE 'pending' END,
       last_error = format('lease of %s expired during attempt %s: the worker was lost mid-call; the attempt counts%s%s',
                           o.leased_by, o.attempts,
                           CASE WHEN o.tool_name = ANY($1::text[])
                                THEN ' and the route is non_idempotent: resolve with drainer resolve' ELSE '' END,
                           CASE WHEN h.ms > 0
                                THEN format('; not sent again before %s (lease expiry + max_retry_after %s: the longest Retry-After the lost answer may have carried) unless that replica writes its answer first',
                                            o.lease_expires_at + h.ms * interval '1 millisecond', h.ms * interval '1 millisecond')
                                ELSE '' END),
       lease_token = NULL,
       lease_expires_at = NULL,
       leased_by = NULL,
       reclaimed_lease = o.lease_token,
       not_before = CASE WHEN h.ms > 0
                         THEN greatest(o.not_before, o.lease_expires_at + h.ms * interval '1 millisecond')
                         ELSE o.not_before END,
       next_attempt_at = now(),
       updated_at = now()
  FROM held h
 WHERE o.seq = h.seq
RETURNING o.seq`

// ReclaimBatch bounds the rows one reclaim statement takes back.
const ReclaimBatch = 1000

// ReclaimPolicy is how a reclaim treats the rows it takes back.
type ReclaimPolicy struct {
	// NonIdempotent lists the tools whose rows park as outcome_unknown.
	NonIdempotent []string
	// Hold is, per tool, how long after its lease expired a reclaimed row
	// is not sent again: the longest Retry-After the lost worker may have
	// been given (the route's max_retry_after). OtherHold applies to the
	// tools Hold does not name. Zero: due at once.
	Hold      map[string]time.Duration
	OtherHold time.Duration
}

// Reclaim takes back up to ReclaimBatch rows whose lease expired and returns
// how many (see reclaimSQL).
func (s *Store) Reclaim(ctx context.Context, db DB, p ReclaimPolicy) (int, error) {
	tools := make([]string, 0, len(p.Hold))
	holds := make([]int64, 0, len(p.Hold))
	for tool, d := range p.Hold {
		tools, holds = append(tools, tool), append(holds, max(d, 0).Milliseconds())
	}
	rows, err := db.Query(ctx, s.sql(reclaimSQL), pgx.QueryExecModeExec, nonNil(p.NonIdempotent), ReclaimBatch,
		tools, holds, max(p.OtherHold, 0).Milliseconds())
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
  FROM {s}.queue o
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
