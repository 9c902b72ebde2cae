package store

import (
	"context"
	"github.com/drainer-io/drainer/outbox"
)

// The operator actions' writes, on the queue rows (the intents by key).
// Each is conditional on the status the action read: a row the daemon
// changed meanwhile is not written, and the caller learns which rows were.

// requeueSQL makes rows pending and due now, each only while it still has
// the status read. next_attempt_at = now() stops at the row's not_before
// floor (a schema trigger), unless $3 clears the floor.
const requeueSQL = `UPDATE {s}.queue o
       SET status = {StatusPending},
           cancel_cause = NULL,
           attempts = CASE WHEN o.status = {StatusFailed} THEN 0 ELSE o.attempts END,
           not_before = CASE WHEN $3 THEN NULL ELSE o.not_before END,
           next_attempt_at = now(),
           updated_at = now()
      FROM unnest($1::text[], $2::text[]) AS c(key, status), {s}.intents i
     WHERE i.key = c.key AND o.seq = i.seq AND o.status = c.status
 RETURNING i.key`

// Requeue makes the rows of keys pending and due now (a failed row with a
// fresh attempt budget), each only while its status is still from[i], and
// returns the keys it changed. A row stays behind its not_before floor
// unless clearFloor.
func (s *Store) Requeue(ctx context.Context, db DB, keys []string, from []outbox.Status, clearFloor bool) ([]string, error) {
	return keysOf(db.Query(ctx, s.sql(requeueSQL), keys, outbox.StatusStrings(from...), clearFloor))
}

// Cancel cancels the pending forward rows among keys, noting lastError,
// and returns the keys it changed.
func (s *Store) Cancel(ctx context.Context, db DB, keys []string, lastError string) ([]string, error) {
	return keysOf(db.Query(ctx, s.sql(`UPDATE {s}.queue o
       SET status = {StatusCancelled}, cancel_cause = 'operator', last_error = $2, updated_at = now()
      FROM {s}.intents i
     WHERE i.key = ANY($1) AND o.seq = i.seq AND o.status = {StatusPending} AND o.kind = {KindForward}
 RETURNING i.key`), keys, lastError))
}

// Settle moves the row of key from status from to to, with lastError and a
// note, and reports whether it did (false: the row is no longer from).
func (s *Store) Settle(ctx context.Context, db DB, key string, from, to outbox.Status, lastError *string, note string) (bool, error) {
	tag, err := db.Exec(ctx, s.sql(`UPDATE {s}.queue o SET status = $3, last_error = $4, note = $5, updated_at = now()
	      FROM {s}.intents i WHERE i.key = $1 AND o.seq = i.seq AND o.status = $2`), key, from, to, lastError, note)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}

// MarkCompensated marks the succeeded forward row of key compensated (a
// human undid its effect) and returns its status afterwards: "" when the
// row is gone.
func (s *Store) MarkCompensated(ctx context.Context, db DB, key string) (outbox.Status, error) {
	var status outbox.Status
	err := db.QueryRow(ctx, s.sql(`WITH u AS (
	        UPDATE {s}.queue o SET status = {StatusCompensated}, updated_at = now()
	          FROM {s}.intents i WHERE i.key = $1 AND o.seq = i.seq AND o.status = {StatusSucceeded} RETURNING o.status)
	    SELECT coalesce((SELECT status FROM u), (SELECT status FROM {s}.outbox WHERE key = $1), '')`), key).Scan(&status)
	return status, err
}
