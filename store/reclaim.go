package store

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// reclaimSQL returns rows whose lease expired (their worker died or hung,
// or its replica lost the database) to pending, or to outcome_unknown on
// non_idempotent routes. The attempt counted at claim stays consumed: the
// request may have reached the provider. A row claimed without a route had
// none counted (ClaimedRow.Counted): it consumes nothing.
//
// A reclaimed row is due again at once: crash recovery takes the lease and
// no fixed hold (docs/reference.md, "Reclaim"). It is held further only by
// what drainer knows, as a not_before floor from its lease expiry, the
// latest moment the lost attempt could have been answered: its route's
// reclaim_hold ($4), and the longest Retry-After its tool was answered
// within the route's max_retry_after ($5; retry_after_marks, recorded by
// the completions), since a provider pushing back on other rows likely
// pushed back on this one too. The row's own floor stays (the schema's
// trigger keeps next_attempt_at at or after not_before). The expired
// lease's token is kept in reclaimed_lease, so that the replica that held
// it can still write the answer it has (see completeSQL), which replaces
// this floor with the provider's own. The rows whose answer the reclaiming
// replica holds itself ($7: being written, or kept to be written once the
// database takes it) are not reclaimed by it: its answer lands on them
// instead of a second attempt.
const reclaimSQL = `
WITH expired AS MATERIALIZED (
    SELECT seq, tool_name, leased_by FROM {s}.queue
     WHERE status = {StatusInFlight} AND lease_expires_at < now()
       AND NOT (seq = ANY ($7::bigint[]))
     ORDER BY lease_expires_at
     LIMIT $2
     FOR UPDATE SKIP LOCKED
), policy AS (
    SELECT e.seq, e.leased_by, coalesce(x.hold_ms, 0) AS hold_ms,
           coalesce((SELECT max(m.longest_ms) FROM {s}.retry_after_marks m
                      WHERE m.tool_name = e.tool_name
                        AND m.bucket > now() - interval '1 minute'
                                      - coalesce(x.window_ms, $6) * interval '1 millisecond'), 0) AS mark_ms
      FROM expired e
      LEFT JOIN unnest($3::text[], $4::bigint[], $5::bigint[]) AS x(tool, hold_ms, window_ms) ON x.tool = e.tool_name
), held AS (
    SELECT seq, leased_by, hold_ms, mark_ms, greatest(hold_ms, mark_ms) AS ms FROM policy
)
UPDATE {s}.queue o
   SET status = CASE WHEN o.tool_name = ANY($1::text[]) THEN {StatusOutcomeUnknown} ELSE {StatusPending} END,
       last_error = format('lease of %s expired during attempt %s: the worker was lost mid-call; the attempt counts%s%s',
                           o.leased_by, o.attempts,
                           CASE WHEN o.tool_name = ANY($1::text[])
                                THEN ' and the route is non_idempotent: resolve with drainer resolve' ELSE '' END,
                           CASE WHEN h.ms > 0
                                THEN format('; not sent again before %s (lease expiry + %s: %s) unless that replica writes its answer first',
                                            o.lease_expires_at + h.ms * interval '1 millisecond', h.ms * interval '1 millisecond',
                                            CASE WHEN h.mark_ms >= h.hold_ms
                                                 THEN 'the longest Retry-After the provider answered this tool recently, which the lost answer may have carried'
                                                 ELSE 'the route''s reclaim_hold' END)
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
RETURNING coalesce(h.leased_by, '')`

// reclaimSettings are the reclaim's transaction-local settings: the reason
// of each reclaimed row's audit entry (audit_change gives drainer.note to
// an entry that ends a claim), a plan made for the statement's own
// arguments (its arrays), never a generic one, and no sort: the expired
// leases are read in the order of each generation's lease index, merged,
// so a pass stops at ReclaimBatch rows instead of reading and sorting every
// expired lease first (TestReclaimReadsOneBatch).
const reclaimSettings = `SELECT set_config('drainer.note', 'reclaimed: the lease expired during the attempt (its replica was lost, stopped or cut off from the database); the attempt counts, if its claim counted one', true),
       set_config('plan_cache_mode', 'force_custom_plan', true), set_config('enable_sort', 'off', true)`

// ReclaimBatch bounds the rows one reclaim statement takes back.
const ReclaimBatch = 1000

// ReclaimPolicy is how a reclaim treats the rows it takes back.
type ReclaimPolicy struct {
	// NonIdempotent lists the tools whose rows park as outcome_unknown.
	NonIdempotent []string
	// Hold is, per tool, how long past its lease expiry a reclaimed row is
	// held at least (the route's reclaim_hold); tools it does not name: 0.
	Hold map[string]time.Duration
	// Window is, per tool, how far back the Retry-After answers of its
	// tool count (the route's max_retry_after); OtherWindow applies to the
	// tools Window does not name.
	Window      map[string]time.Duration
	OtherWindow time.Duration
	// Held lists the rows (seq) whose answer the reclaiming replica holds
	// and has not written yet: left to it, not reclaimed by it.
	Held []int64
}

// Reclaim takes back up to ReclaimBatch rows whose lease expired and returns
// how many (see reclaimSQL).
func (s *Store) Reclaim(ctx context.Context, db DB, p ReclaimPolicy) (int, error) {
	from, err := s.ReclaimFrom(ctx, db, p)
	n := 0
	for _, rows := range from {
		n += rows
	}
	return n, err
}

// ReclaimFrom is Reclaim, with the rows taken back counted by the replica
// whose lease expired. Each reclaimed row's audit entry gives the reason
// (reclaimSettings).
func (s *Store) ReclaimFrom(ctx context.Context, db DB, p ReclaimPolicy) (map[string]int, error) {
	tools := make([]string, 0, len(p.Hold)+len(p.Window))
	for tool := range p.Hold {
		tools = append(tools, tool)
	}
	for tool := range p.Window {
		if _, ok := p.Hold[tool]; !ok {
			tools = append(tools, tool)
		}
	}
	holds := make([]int64, len(tools))
	windows := make([]*int64, len(tools))
	for i, tool := range tools {
		holds[i] = max(p.Hold[tool], 0).Milliseconds()
		if w, ok := p.Window[tool]; ok {
			ms := max(w, 0).Milliseconds()
			windows[i] = &ms
		}
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(reclaimSettings)
	held := p.Held
	if held == nil {
		held = []int64{}
	}
	b.Queue(s.sql(reclaimSQL), nonNil(p.NonIdempotent), ReclaimBatch, tools, holds, windows, max(p.OtherWindow, 0).Milliseconds(), held)
	b.Queue("COMMIT")
	br := db.SendBatch(ctx, b)
	defer br.Close()
	for range 2 {
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("reclaim expired leases: %w", err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("reclaim expired leases: %w", err)
	}
	replicas, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("reclaim expired leases: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("reclaim expired leases: commit: %w", err)
	}
	from := map[string]int{}
	for _, r := range replicas {
		from[r]++
	}
	return from, nil
}

// markRetryAfterSQL raises each tool's Retry-After mark of the current
// minute to the longest answer of the batch ($1 tools, $2 milliseconds;
// sorted by tool, so concurrent completions lock marks in one order).
const markRetryAfterSQL = `
INSERT INTO {s}.retry_after_marks AS m (tool_name, bucket, longest_ms)
SELECT tool, date_trunc('minute', now()), ms FROM unnest($1::text[], $2::bigint[]) AS x(tool, ms)
ON CONFLICT (tool_name, bucket) DO UPDATE SET longest_ms = excluded.longest_ms
 WHERE m.longest_ms < excluded.longest_ms`

// queueRetryAfterMarks queues, into a completion's transaction, the marks
// of the Retry-After answers among cs, if any carried one; it reports
// whether it queued a statement.
func (s *Store) queueRetryAfterMarks(b *pgx.Batch, cs []Completion) bool {
	var longest map[string]int64 // allocated only for a batch that carries a Retry-After
	for _, c := range cs {
		if ms := c.RetryAfter.Milliseconds(); ms > 0 && c.Tool != "" && ms > longest[c.Tool] {
			if longest == nil {
				longest = map[string]int64{}
			}
			longest[c.Tool] = ms
		}
	}
	if len(longest) == 0 {
		return false
	}
	tools := slices.Sorted(maps.Keys(longest))
	ms := make([]int64, len(tools))
	for i, tool := range tools {
		ms[i] = longest[tool]
	}
	b.Queue(s.sql(markRetryAfterSQL), tools, ms)
	return true
}

// pruneRetryAfterMarksSQL drops the marks older than $1 milliseconds.
const pruneRetryAfterMarksSQL = `
DELETE FROM {s}.retry_after_marks WHERE bucket < now() - interval '1 minute' - $1 * interval '1 millisecond'`

// PruneRetryAfterMarks drops the Retry-After marks no reclaim can read any
// more: older than keep (the longest max_retry_after of any route).
func (s *Store) PruneRetryAfterMarks(ctx context.Context, db DB, keep time.Duration) (int64, error) {
	tag, err := db.Exec(ctx, s.sql(pruneRetryAfterMarksSQL), max(keep, 0).Milliseconds())
	if err != nil {
		return 0, fmt.Errorf("prune retry_after_marks: %w", err)
	}
	return tag.RowsAffected(), nil
}

// stillLeasedSQL counts the rows of (seq, token) pairs that are still
// in_flight under that lease token.
const stillLeasedSQL = `
SELECT count(*)
  FROM {s}.queue o
  JOIN unnest($1::bigint[], $2::uuid[]) AS u(seq, token) ON o.seq = u.seq AND o.lease_token = u.token
 WHERE o.status = {StatusInFlight}`

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
