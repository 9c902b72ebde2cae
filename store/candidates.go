package store

import (
	"context"
	"fmt"
	"github.com/drainer-io/drainer/outbox"
	"time"
)

// Candidate is a row read for an operator action (requeue, cancel): what
// the action decides on, before its conditional write.
type Candidate struct {
	Key            string        `db:"key"`
	Seq            int64         `db:"seq"`
	AgentRunID     string        `db:"agent_run_id"`
	StepID         string        `db:"step_id"`
	ToolName       string        `db:"tool_name"`
	Kind           outbox.Kind   `db:"kind"`
	Status         outbox.Status `db:"status"`
	Attempts       int           `db:"attempts"`
	LeaseExpiresAt *time.Time    `db:"lease_expires_at"`
	// LeaseExpired: the lease ended before now, on the database's clock
	// (its replica died or lost the database; a reclaimer takes it back).
	LeaseExpired bool `db:"lease_expired"`
	// NotBefore is the row's floor when it lies in the future.
	NotBefore *time.Time `db:"not_before"`
}

const candidateColumns = `o.key, o.seq, o.agent_run_id, o.step_id, o.tool_name, o.kind, o.status, o.attempts, o.lease_expires_at,
	coalesce(o.lease_expires_at <= now(), false) AS lease_expired,
	CASE WHEN o.not_before > now() THEN o.not_before END AS not_before`

// candidatesSQL reads the next batch of rows matching a filter (%s) in seq
// order.
const candidatesSQL = `SELECT ` + candidateColumns + ` FROM {s}.outbox o
     WHERE o.seq > $1 AND %s ORDER BY o.seq LIMIT $2`

// failedCandidatesSQL reads the failed forward rows of some runs past a
// batch that also match a filter (%s): requeue handles them with the batch.
const failedCandidatesSQL = `SELECT ` + candidateColumns + ` FROM {s}.outbox o
     WHERE o.seq > $1 AND o.agent_run_id = ANY($2) AND o.kind = {KindForward} AND o.status = {StatusFailed}
       AND %s ORDER BY o.seq`

// CandidateOf reads the row of key: none or one.
func (s *Store) CandidateOf(ctx context.Context, db DB, key string) ([]Candidate, error) {
	return collect[Candidate](ctx, db, s.sql(`SELECT `+candidateColumns+` FROM {s}.outbox o WHERE o.key = $1`), key)
}

// Candidates reads up to limit rows matching f with seq > after, in seq
// order.
func (s *Store) Candidates(ctx context.Context, db DB, f Filter, after int64, limit int) ([]Candidate, error) {
	args := []any{after, limit}
	return collect[Candidate](ctx, db, s.sql(fmt.Sprintf(candidatesSQL, f.where(&args))), args...)
}

// FailedCandidates reads the failed forward rows of runs with seq > after
// that match f, in seq order.
func (s *Store) FailedCandidates(ctx context.Context, db DB, f Filter, after int64, runs []string) ([]Candidate, error) {
	args := []any{after, runs}
	return collect[Candidate](ctx, db, s.sql(fmt.Sprintf(failedCandidatesSQL, f.where(&args))), args...)
}
