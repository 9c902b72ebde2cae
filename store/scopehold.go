package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Scope holds. A tool ordered per business_scope sends a scope's rows one
// at a time: while a scope's first open row is pending or in flight, the
// rows behind it are due but cannot be claimed. Left due, they sit at the
// front of the due index, and every claim walks past each of them (with
// the look-up of its scope's earlier rows) before it reaches a row it may
// take: one scope of 20,000 rows made every claim of the replica take
// about a second, for every tool. So the rows queued behind a scope's
// first row are held: pushed out of the front of the due index, and the
// scope's next row made due again as soon as the one before it settles.
// A hold only moves next_attempt_at; the claim's own check of the scope's
// order stays what keeps the order, so a row made due early by anything
// else (an operator, a wake) is still never sent before its turn.

// holdScopesSQL holds the rows of scopes ($1 tools, $2 scopes, pairwise)
// past $3 (each scope's own) in scope order: pending rows never attempted
// that would come due within half the hold ($4 ms) are pushed to about
// now() + the hold (jittered ±25 %), at most $5 of a scope. The scope's
// first open row is never held, whatever $3 says: the row the hold was
// asked for may have settled since. It walks each scope's entries of
// queue_scope_order_idx past $3 only, and returns, per scope, the rows it
// held and the last seq it looked at: the last row held when it held $5,
// else the scope's last open row, so that the scope's next hold starts
// past the rows this one looked at.
const holdScopesSQL = `
WITH sc AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[]) AS sc(tool, scope, after)
), walk AS MATERIALIZED (
    SELECT w.seq, sc.tool, sc.scope FROM sc CROSS JOIN LATERAL (
        SELECT q.seq FROM {s}.queue q
         WHERE q.tool_name = sc.tool AND q.business_scope = sc.scope AND q.seq > sc.after
           AND q.seq > (SELECT min(f.seq) FROM {s}.queue f
                         WHERE f.tool_name = sc.tool AND f.business_scope = sc.scope
                           AND f.status IN ({StatusPending}, {StatusInFlight}))
           AND q.status = {StatusPending} AND q.attempts = 0
           AND q.next_attempt_at < now() + $4 * interval '1 millisecond' * 0.5
         ORDER BY q.seq
         LIMIT $5
         FOR UPDATE SKIP LOCKED) w
), held AS (
    UPDATE {s}.queue o
       SET next_attempt_at = now() + $4 * interval '1 millisecond' * (0.75 + random() / 2)
     WHERE o.seq = ANY (ARRAY(SELECT seq FROM walk))
    RETURNING 1
)
SELECT sc.tool, sc.scope, n.held,
       CASE WHEN n.held = $5 THEN n.last
            ELSE coalesce((SELECT max(f.seq) FROM {s}.queue f
                            WHERE f.tool_name = sc.tool AND f.business_scope = sc.scope
                              AND f.status IN ({StatusPending}, {StatusInFlight})), sc.after)
       END
  FROM sc CROSS JOIN LATERAL (
    SELECT count(*) AS held, max(w.seq) AS last FROM walk w
     WHERE w.tool = sc.tool AND w.scope = sc.scope) n`

// HoldBatch bounds the rows one hold moves in a scope; a larger backlog
// is held further at the scope's next claims.
const HoldBatch = 5000

// ScopeHold asks for the rows of a scope queued behind its first row (the
// one a claim just leased) to be held, past After: the last seq an earlier
// hold of the scope looked at, or the leased row's own.
type ScopeHold struct {
	Tool, Scope string
	After       int64
}

// ScopeHeld is what a hold did in one scope: the rows it held, and the
// last seq it looked at (ScopeHold.After of the scope's next hold).
type ScopeHeld struct {
	Tool, Scope string
	Held, Last  int64
}

// HoldScopes holds, for about hold, the rows of each scope of hs queued
// behind its first row, in one transaction.
func (s *Store) HoldScopes(ctx context.Context, db DB, hs []ScopeHold, hold time.Duration) ([]ScopeHeld, error) {
	tools, scopes, after := make([]string, len(hs)), make([]string, len(hs)), make([]int64, len(hs))
	for i, h := range hs {
		tools[i], scopes[i], after[i] = h.Tool, h.Scope, h.After
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(s.sql(scopeLockSQL), tools, scopes)
	b.Queue(s.sql(holdScopesSQL), tools, scopes, after, hold.Milliseconds(), HoldBatch)
	b.Queue("COMMIT")
	var out []ScopeHeld
	err := runLocked(db.SendBatch(ctx, b), func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (ScopeHeld, error) {
			var h ScopeHeld
			return h, r.Scan(&h.Tool, &h.Scope, &h.Held, &h.Last)
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("hold the rows queued behind %d scopes' first rows: %w", len(hs), err)
	}
	return out, nil
}

// scopeLockSQL takes, for the transaction, the lock of each scope ($1
// tools, $2 scopes, pairwise), in one order. A hold and a release of one
// scope take turns: a hold whose statement began before the scope's first
// row settled could otherwise hold the row that became first, after its
// release had looked, and it would wait for the hold to end. Taken before
// the statement, the lock makes the later of the two see what the earlier
// wrote. Neither needs its commit on disk: a hold or release lost in a
// crash costs at most one hold.
const scopeLockSQL = `
SELECT set_config('synchronous_commit', 'off', true),
       (SELECT count(pg_advisory_xact_lock(k)) FROM (
            SELECT DISTINCT hashtextextended('{s}.scope.' || length(tool) || '.' || tool || scope, 0) AS k
              FROM unnest($1::text[], $2::text[]) AS sc(tool, scope)
             ORDER BY k) keys)`

// runLocked reads a batch of BEGIN, scopeLockSQL, one statement (read by
// read) and COMMIT.
func runLocked(br pgx.BatchResults, read func(pgx.BatchResults) error) error {
	defer br.Close()
	for range 2 {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	if err := read(br); err != nil {
		return err
	}
	if _, err := br.Exec(); err != nil {
		return err
	}
	return br.Close()
}

// releaseScopesSQL makes due now the first open row of each scope ($1
// tools, $2 scopes, pairwise) when it is pending, never attempted and
// held; its not_before floor still holds (schema trigger). A first row
// waiting for its own retry has been attempted: it is left alone. It
// returns where each scope's first open row now stands in the claim order
// when it is pending: released, or never held (queued after the last hold).
const releaseScopesSQL = `
WITH first AS MATERIALIZED (
    SELECT f.seq, f.status, f.attempts, f.next_attempt_at
      FROM unnest($1::text[], $2::text[]) AS sc(tool, scope)
     CROSS JOIN LATERAL (
        SELECT h.seq, h.status, h.attempts, h.next_attempt_at FROM {s}.queue h
         WHERE h.tool_name = sc.tool AND h.business_scope = sc.scope
           AND h.status IN ({StatusPending}, {StatusInFlight})
         ORDER BY h.seq
         LIMIT 1) f
), released AS (
    UPDATE {s}.queue o SET next_attempt_at = now()
      FROM first
     WHERE o.seq = first.seq AND o.status = {StatusPending} AND o.attempts = 0
       AND o.next_attempt_at > now()
    RETURNING o.seq, o.next_attempt_at
)
SELECT f.seq, coalesce(r.next_attempt_at, f.next_attempt_at)
  FROM first f LEFT JOIN released r USING (seq)
 WHERE f.status = {StatusPending}`

// ReleaseScopes makes the next row of each scope (tools[i], scopes[i]) due
// now when a hold keeps it back: the row before it settled. It returns the
// position in the claim order of each scope's next row that is pending,
// held or not: a claim that starts past it would miss it.
func (s *Store) ReleaseScopes(ctx context.Context, db DB, tools, scopes []string) ([]Position, error) {
	var out []Position
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(s.sql(scopeLockSQL), tools, scopes)
	b.Queue(s.sql(releaseScopesSQL), tools, scopes)
	b.Queue("COMMIT")
	err := runLocked(db.SendBatch(ctx, b), func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Position, error) {
			var p Position
			return p, r.Scan(&p.Seq, &p.Due)
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("release the next rows of %d scopes: %w", len(tools), err)
	}
	return out, nil
}
