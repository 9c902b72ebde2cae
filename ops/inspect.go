package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Inspection is everything known about one key. Its JSON object carries the
// row's columns at the top level (key and status also for a pruned key),
// then pruned_at, saga, run_rows and audit.
type Inspection struct {
	Key    string `json:"key"`
	Status string `json:"status"`
	*Row          // nil when the row was pruned
	// PrunedAt is set when only the tombstone of the key is left; Status is
	// then its final status.
	PrunedAt *time.Time `json:"pruned_at,omitempty"`
	// Saga is the saga of the row's run, when the run is aborted.
	Saga *Saga `json:"saga"`
	// RunRows are the rows of the row's run in seq order (at most
	// MaxRunRows).
	RunRows []RunRow `json:"run_rows"`
	// Audit is the key's audit trail, oldest first.
	Audit []AuditEntry `json:"audit"`
}

// MaxRunRows bounds Inspection.RunRows.
const MaxRunRows = 1000

// Saga is a row of the sagas view: an aborted run and its compensation.
type Saga struct {
	AgentRunID             string    `json:"agent_run_id" db:"agent_run_id"`
	SagaState              string    `json:"saga_state" db:"saga_state"`
	SagaNote               *string   `json:"saga_note" db:"saga_note"`
	AbortedAt              time.Time `json:"aborted_at" db:"aborted_at"`
	AbortReason            string    `json:"abort_reason" db:"abort_reason"`
	AbortedBy              string    `json:"aborted_by" db:"aborted_by"`
	ForwardOpen            int64     `json:"forward_open" db:"forward_open"`
	ForwardSucceeded       int64     `json:"forward_succeeded" db:"forward_succeeded"`
	ForwardCompensated     int64     `json:"forward_compensated" db:"forward_compensated"`
	ForwardFailed          int64     `json:"forward_failed" db:"forward_failed"`
	ForwardCancelled       int64     `json:"forward_cancelled" db:"forward_cancelled"`
	CompensationsOpen      int64     `json:"compensations_open" db:"compensations_open"`
	CompensationsSucceeded int64     `json:"compensations_succeeded" db:"compensations_succeeded"`
	CompensationsFailed    int64     `json:"compensations_failed" db:"compensations_failed"`
	SagaUpdatedAt          time.Time `json:"saga_updated_at" db:"saga_updated_at"`
}

// RunRow is a short view of one row of a run.
type RunRow struct {
	Key      string `json:"key" db:"key"`
	Seq      int64  `json:"seq" db:"seq"`
	StepID   string `json:"step_id" db:"step_id"`
	ToolName string `json:"tool_name" db:"tool_name"`
	Kind     string `json:"kind" db:"kind"`
	Status   string `json:"status" db:"status"`
	Attempts int    `json:"attempts" db:"attempts"`
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

// Inspect returns the row of key with its run, saga and audit trail. A
// pruned key answers its final status from the tombstones; an unknown key
// is a *NotFoundError.
func (c *Client) Inspect(ctx context.Context, key string) (*Inspection, error) {
	var in *Inspection
	err := c.readOnly(ctx, func(tx pgx.Tx) error {
		var err error
		in, err = c.inspect(ctx, tx, key)
		return err
	})
	if err != nil {
		return nil, err
	}
	return in, nil
}

func (c *Client) inspect(ctx context.Context, tx pgx.Tx, key string) (*Inspection, error) {
	row, err := c.row(ctx, tx, key)
	var nf *NotFoundError
	switch {
	case errors.As(err, &nf):
		return c.inspectPruned(ctx, tx, key, err)
	case err != nil:
		return nil, err
	}
	in := &Inspection{Key: row.Key, Status: row.Status, Row: row}

	sagas, err := collect[Saga](ctx, tx, c.sql(`SELECT * FROM {s}.sagas WHERE agent_run_id = $1`), row.AgentRunID)
	if err != nil {
		return nil, fmt.Errorf("inspect %s: saga: %w", key, err)
	}
	if len(sagas) > 0 {
		in.Saga = &sagas[0]
	}
	in.RunRows, err = collect[RunRow](ctx, tx, c.sql(`SELECT key, seq, step_id, tool_name, kind, status, attempts
	    FROM {s}.outbox WHERE agent_run_id = $1 ORDER BY seq LIMIT $2`), row.AgentRunID, MaxRunRows)
	if err != nil {
		return nil, fmt.Errorf("inspect %s: run rows: %w", key, err)
	}
	if in.Audit, err = c.auditOf(ctx, tx, key); err != nil {
		return nil, err
	}
	return in, nil
}

func (c *Client) inspectPruned(ctx context.Context, tx pgx.Tx, key string, notFound error) (*Inspection, error) {
	in := &Inspection{Key: key, RunRows: []RunRow{}}
	err := tx.QueryRow(ctx, c.sql(`SELECT final_status, pruned_at FROM {s}.tombstones WHERE key = $1`), key).
		Scan(&in.Status, &in.PrunedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound
	}
	if err != nil {
		return nil, fmt.Errorf("inspect %s: tombstone: %w", key, err)
	}
	if in.Audit, err = c.auditOf(ctx, tx, key); err != nil {
		return nil, err
	}
	return in, nil
}

func (c *Client) auditOf(ctx context.Context, q querier, key string) ([]AuditEntry, error) {
	es, err := collect[AuditEntry](ctx, q, c.sql(`SELECT id, at, event, from_status, to_status, attempts,
	        response_status, actor, reason FROM {s}.audit WHERE key = $1 ORDER BY id`), key)
	if err != nil {
		return nil, fmt.Errorf("inspect %s: audit: %w", key, err)
	}
	return es, nil
}

// row reads the row of key, or returns a *NotFoundError.
func (c *Client) row(ctx context.Context, q querier, key string) (*Row, error) {
	rows, err := collect[Row](ctx, q, c.sql(`SELECT `+rowColumns+` FROM {s}.outbox o WHERE o.key = $1`), key)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	if len(rows) == 0 {
		return nil, &NotFoundError{What: "row with key " + key}
	}
	return &rows[0], nil
}

// collect runs a query and scans its rows into T by column name. It never
// returns a nil slice, so JSON shows [] rather than null.
func collect[T any](ctx context.Context, q querier, sql string, args ...any) ([]T, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[T])
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = []T{}
	}
	return out, nil
}
