package store

import (
	"context"
	"time"
)

// Actor is who changes rows in a transaction, and why: the audit triggers
// record it on every status change the transaction makes.
type Actor struct {
	Name   string
	Reason string
	// Action is the audit event of changes that are not a plain status
	// move ("operator:requeue").
	Action string
}

// SetActor names the actor of the transaction of db (transaction-local
// settings drainer.actor, drainer.reason and drainer.action).
func (s *Store) SetActor(ctx context.Context, db DB, a Actor) error {
	_, err := db.Exec(ctx, `SELECT set_config('drainer.actor', $1, true), set_config('drainer.reason', $2, true),
	        set_config('drainer.action', $3, true)`, a.Name, a.Reason, a.Action)
	return err
}

// AuditAppend appends an entry to the audit chain of key ("route:X",
// "run:R", a row's key) for an event that changes no row's status; reason
// may be nil.
func (s *Store) AuditAppend(ctx context.Context, db DB, key, event string, reason *string) error {
	_, err := db.Exec(ctx, s.sql(`SELECT {s}.audit_append($1, $2, $3)`), key, event, reason)
	return err
}

// AuditAppendEach appends the same entry to the chain of each of keys.
func (s *Store) AuditAppendEach(ctx context.Context, db DB, keys []string, event string, reason *string) error {
	_, err := db.Exec(ctx, s.sql(`SELECT {s}.audit_append(k, $2, $3) FROM unnest($1::text[]) AS k`), keys, event, reason)
	return err
}

// AuditEntry is one entry of the audit trail (hashes left out).
type AuditEntry struct {
	ID             int64     `json:"id" db:"id"`
	At             time.Time `json:"at" db:"at"`
	Event          string    `json:"event" db:"event"`
	FromStatus     *string   `json:"from_status" db:"from_status"`
	ToStatus       *string   `json:"to_status" db:"to_status"`
	Attempts       *int      `json:"attempts" db:"attempts"`
	ResponseStatus *int      `json:"response_status" db:"response_status"`
	Actor          string    `json:"actor" db:"actor"`
	Reason         *string   `json:"reason" db:"reason"`
}

// AuditTrail returns the audit chain of key, oldest first.
func (s *Store) AuditTrail(ctx context.Context, db DB, key string) ([]AuditEntry, error) {
	return collect[AuditEntry](ctx, db, s.sql(`SELECT id, at, event, from_status, to_status, attempts,
	        response_status, actor, reason FROM {s}.audit WHERE key = $1 ORDER BY id`), key)
}

// CountAudit counts the audit entries and their chains.
func (s *Store) CountAudit(ctx context.Context, db DB) (entries, chains int64, err error) {
	err = db.QueryRow(ctx, s.sql(`SELECT count(*), count(DISTINCT key) FROM {s}.audit`)).Scan(&entries, &chains)
	return entries, chains, err
}

// BrokenLink is an audit entry that does not verify.
type BrokenLink struct {
	ID      int64  `json:"id" db:"id"`
	Key     string `json:"key" db:"key"`
	Problem string `json:"problem" db:"problem"`
}

// VerifyAudit checks every hash chain of the audit trail (audit_verify,
// migrations/code/functions/audit_verify.sql) and returns the first limit
// broken links.
func (s *Store) VerifyAudit(ctx context.Context, db DB, limit int) ([]BrokenLink, error) {
	return collect[BrokenLink](ctx, db, s.sql(`SELECT id, key, problem FROM {s}.audit_verify($1)`), limit)
}
