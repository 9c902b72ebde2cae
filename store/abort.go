package store

import (
	"context"
	"errors"
	"github.com/drainer-io/drainer/outbox"
	"time"

	"github.com/jackc/pgx/v5"
)

// RunExists reports whether run has a row.
func (s *Store) RunExists(ctx context.Context, db DB, run string) (bool, error) {
	var exists bool
	err := db.QueryRow(ctx, s.sql(`SELECT EXISTS (SELECT 1 FROM {s}.outbox WHERE agent_run_id = $1)`), run).Scan(&exists)
	return exists, err
}

// ToolExists reports whether tool has a row.
func (s *Store) ToolExists(ctx context.Context, db DB, tool string) (bool, error) {
	var exists bool
	err := db.QueryRow(ctx, s.sql(`SELECT EXISTS (SELECT 1 FROM {s}.intents WHERE tool_name = $1)`), tool).Scan(&exists)
	return exists, err
}

// RunAbort is the record of an aborted run (its runs row).
type RunAbort struct {
	At     time.Time
	By     string
	Reason string
}

// ReadAbort returns the abort of run, or nil when it is not aborted.
func (s *Store) ReadAbort(ctx context.Context, db DB, run string) (*RunAbort, error) {
	var a RunAbort
	err := db.QueryRow(ctx, s.sql(`SELECT aborted_at, aborted_by, abort_reason FROM {s}.runs WHERE agent_run_id = $1`), run).
		Scan(&a.At, &a.By, &a.Reason)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &a, nil
}

// AbortRun aborts run (migrations/code/functions/abort_run_internal.sql):
// its never-attempted forward rows are cancelled, and the first abort's
// record is kept. It returns how many rows it cancelled.
func (s *Store) AbortRun(ctx context.Context, db DB, run, reason, actor string) (int, error) {
	var n int
	err := db.QueryRow(ctx, s.sql(`SELECT {s}.abort_run_internal($1, $2, $3)`), run, reason, actor).Scan(&n)
	return n, err
}

// Saga is a row of the sagas view: an aborted run and its compensation.
type Saga struct {
	AgentRunID             string           `json:"agent_run_id" db:"agent_run_id"`
	SagaState              outbox.SagaState `json:"saga_state" db:"saga_state"`
	SagaNote               *string          `json:"saga_note" db:"saga_note"`
	AbortedAt              time.Time        `json:"aborted_at" db:"aborted_at"`
	AbortReason            string           `json:"abort_reason" db:"abort_reason"`
	AbortedBy              string           `json:"aborted_by" db:"aborted_by"`
	ForwardOpen            int64            `json:"forward_open" db:"forward_open"`
	ForwardSucceeded       int64            `json:"forward_succeeded" db:"forward_succeeded"`
	ForwardCompensated     int64            `json:"forward_compensated" db:"forward_compensated"`
	ForwardFailed          int64            `json:"forward_failed" db:"forward_failed"`
	ForwardCancelled       int64            `json:"forward_cancelled" db:"forward_cancelled"`
	CompensationsOpen      int64            `json:"compensations_open" db:"compensations_open"`
	CompensationsSucceeded int64            `json:"compensations_succeeded" db:"compensations_succeeded"`
	CompensationsFailed    int64            `json:"compensations_failed" db:"compensations_failed"`
	SagaUpdatedAt          time.Time        `json:"saga_updated_at" db:"saga_updated_at"`
}

// ReadSaga returns the saga of run, or nil when the run is not aborted.
func (s *Store) ReadSaga(ctx context.Context, db DB, run string) (*Saga, error) {
	return first(collect[Saga](ctx, db, s.sql(`SELECT * FROM {s}.sagas WHERE agent_run_id = $1`), run))
}

// CountCancelled counts the cancelled rows of run.
func (s *Store) CountCancelled(ctx context.Context, db DB, run string) (int, error) {
	var n int
	err := db.QueryRow(ctx, s.sql(`SELECT count(*) FROM {s}.outbox WHERE agent_run_id = $1 AND status = {StatusCancelled}`), run).Scan(&n)
	return n, err
}

// ContinueSaga sets the saga of run back to waiting, so the daemons' sweep
// advances it, and returns its state: "" when the run is not aborted.
func (s *Store) ContinueSaga(ctx context.Context, db DB, run string) (outbox.SagaState, error) {
	var state outbox.SagaState
	err := db.QueryRow(ctx, s.sql(`WITH u AS (
	        UPDATE {s}.runs SET saga_state = {SagaWaiting}, saga_updated_at = now()
	         WHERE agent_run_id = $1 RETURNING saga_state)
	    SELECT coalesce((SELECT saga_state FROM u), '')`), run).Scan(&state)
	return state, err
}
