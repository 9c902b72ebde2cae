package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/drainer-io/drainer/outbox"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Row is one outbox row as the operator commands read it. Its JSON names
// are the column names (docs/reference.md §2), plus the extras first_attempt_at,
// last_problem, forward_key, note, leased_by and lease_expires_at; `drainer
// list` and `drainer inspect` print it as it is.
type Row struct {
	Key            string          `json:"key" db:"key"`
	Seq            int64           `json:"seq" db:"seq"`
	AgentRunID     string          `json:"agent_run_id" db:"agent_run_id"`
	StepID         string          `json:"step_id" db:"step_id"`
	ToolName       string          `json:"tool_name" db:"tool_name"`
	BusinessScope  string          `json:"business_scope" db:"business_scope"`
	Kind           outbox.Kind     `json:"kind" db:"kind"`
	Payload        json.RawMessage `json:"payload" db:"payload"`
	Status         outbox.Status   `json:"status" db:"status"`
	Attempts       int             `json:"attempts" db:"attempts"`
	NextAttemptAt  time.Time       `json:"next_attempt_at" db:"next_attempt_at"`
	FirstAttemptAt *time.Time      `json:"first_attempt_at" db:"first_attempt_at"`
	LastError      *string         `json:"last_error" db:"last_error"`
	LastProblem    json.RawMessage `json:"last_problem" db:"last_problem"`
	Response       json.RawMessage `json:"response" db:"response"`
	ResponseStatus *int            `json:"response_status" db:"response_status"`
	ForwardKey     *string         `json:"forward_key" db:"forward_key"`
	Note           *string         `json:"note" db:"note"`
	LeasedBy       *string         `json:"leased_by" db:"leased_by"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at" db:"lease_expires_at"`
	CreatedAt      time.Time       `json:"created_at" db:"created_at"`
	UpdatedAt      time.Time       `json:"updated_at" db:"updated_at"`
}

// rowColumns selects every field of Row from outbox o.
const rowColumns = `o.key, o.seq, o.agent_run_id, o.step_id, o.tool_name, o.business_scope, o.kind, o.payload,
	o.status, o.attempts, o.next_attempt_at, o.first_attempt_at, o.last_error, o.last_problem, o.response,
	o.response_status, o.forward_key, o.note, o.leased_by, o.lease_expires_at, o.created_at, o.updated_at`

// Filter selects outbox rows for the operator commands. Zero fields match
// everything. The caller validates it.
type Filter struct {
	Status outbox.Status
	Run    string // agent_run_id
	Tool   string // tool_name
	// OlderThan matches rows whose updated_at is more than this long ago,
	// by the database clock.
	OlderThan time.Duration
	Scope     string // business_scope
	// Payload matches rows whose payload contains this JSON value
	// (payload @> Payload), passed as a parameter.
	Payload json.RawMessage
	// Keys, when not nil, matches only the rows of these keys (an empty
	// list matches none): the console's confirmation of a dry run acts on
	// exactly the rows the dry run showed.
	Keys []string
}

// where renders the filter as SQL conditions on outbox o, appending its
// arguments to args. Only placeholders enter the text, never a value.
func (f Filter) where(args *[]any) string {
	conds := []string{"true"}
	add := func(cond string, v any) {
		*args = append(*args, v)
		conds = append(conds, strings.ReplaceAll(cond, "$?", "$"+strconv.Itoa(len(*args))))
	}
	if f.Status != "" {
		add("o.status = $?", f.Status)
	}
	if f.Run != "" {
		add("o.agent_run_id = $?", f.Run)
	}
	if f.Tool != "" {
		add("o.tool_name = $?", f.Tool)
	}
	if f.OlderThan > 0 {
		add("o.updated_at < now() - $?::bigint * interval '1 microsecond'", f.OlderThan.Microseconds())
	}
	if f.Scope != "" {
		add("o.business_scope = $?", f.Scope)
	}
	if len(f.Payload) > 0 {
		add("o.payload @> $?::jsonb", string(f.Payload))
	}
	if f.Keys != nil {
		add("o.key = ANY($?::text[])", f.Keys)
	}
	return strings.Join(conds, " AND ")
}

// listRowsSQL pages through the rows matching a filter in seq order: its
// columns (first %s) and its conditions (second %s).
const listRowsSQL = `SELECT %s FROM {s}.outbox o
     WHERE o.seq > $1 AND %s ORDER BY o.seq LIMIT $2`

// EachRow calls fn with each of up to limit rows matching f with seq >
// after, in seq order, whole: payload and response included (`drainer list
// --output json` prints them). Each row is handed over as it arrives, so a
// caller that keeps none holds one row, not the page: a page of rows as
// large as drainer.max_payload_bytes would otherwise be held whole. An
// error of fn stops the read and is returned. A list that shows neither
// payload nor response reads ListRowSummaries.
func (s *Store) EachRow(ctx context.Context, db DB, f Filter, after int64, limit int, fn func(*Row) error) error {
	args := []any{after, limit}
	return each(ctx, db, s.sql(fmt.Sprintf(listRowsSQL, rowColumns, f.where(&args))), args, fn)
}

// RowSummary is a row as a list shows it: the columns of Row but payload
// and response, and the others a list does not show. A payload may be as
// large as drainer.max_payload_bytes and a response as an adapter's
// response_limit, so a page of a list never reads them; ReadRow reads one
// row whole. Their sizes as stored stand in for them (pg_column_size:
// after compression, known without reading the value; null without one).
type RowSummary struct {
	Key                 string        `json:"key" db:"key"`
	Seq                 int64         `json:"seq" db:"seq"`
	AgentRunID          string        `json:"agent_run_id" db:"agent_run_id"`
	StepID              string        `json:"step_id" db:"step_id"`
	ToolName            string        `json:"tool_name" db:"tool_name"`
	BusinessScope       string        `json:"business_scope" db:"business_scope"`
	Kind                outbox.Kind   `json:"kind" db:"kind"`
	Status              outbox.Status `json:"status" db:"status"`
	Attempts            int           `json:"attempts" db:"attempts"`
	NextAttemptAt       time.Time     `json:"next_attempt_at" db:"next_attempt_at"`
	LastError           *string       `json:"last_error" db:"last_error"`
	ResponseStatus      *int          `json:"response_status" db:"response_status"`
	CreatedAt           time.Time     `json:"created_at" db:"created_at"`
	UpdatedAt           time.Time     `json:"updated_at" db:"updated_at"`
	PayloadStoredBytes  *int          `json:"payload_stored_bytes" db:"payload_stored_bytes"`
	ResponseStoredBytes *int          `json:"response_stored_bytes" db:"response_stored_bytes"`
}

// summaryColumns selects every field of RowSummary from outbox o.
const summaryColumns = `o.key, o.seq, o.agent_run_id, o.step_id, o.tool_name, o.business_scope, o.kind, o.status,
	o.attempts, o.next_attempt_at, o.last_error, o.response_status, o.created_at, o.updated_at,
	pg_column_size(o.payload) AS payload_stored_bytes, pg_column_size(o.response) AS response_stored_bytes`

// ListRowSummaries returns up to limit rows matching f with seq > after,
// in seq order, as a list shows them: without payload and response.
func (s *Store) ListRowSummaries(ctx context.Context, db DB, f Filter, after int64, limit int) ([]RowSummary, error) {
	args := []any{after, limit}
	return collect[RowSummary](ctx, db, s.sql(fmt.Sprintf(listRowsSQL, summaryColumns, f.where(&args))), args...)
}

// ReadRow returns the row of key, or nil when there is none.
func (s *Store) ReadRow(ctx context.Context, db DB, key string) (*Row, error) {
	return first(collect[Row](ctx, db, s.sql(`SELECT `+rowColumns+` FROM {s}.outbox o WHERE o.key = $1`), key))
}

// RowPreview is what ReadRowPreview read of a row's payload and response:
// the size of each as text, and, for one larger than the bound, its first
// characters (the row holds it as nil).
type RowPreview struct {
	PayloadBytes, ResponseBytes int
	Payload, Response           *string
}

// boundedRowColumns are rowColumns with payload and response read only when
// not larger than $2 bytes as text.
var boundedRowColumns = strings.NewReplacer(
	"o.payload,", "CASE WHEN octet_length(o.payload::text) <= $2 THEN o.payload END AS payload,",
	"o.response,", "CASE WHEN octet_length(o.response::text) <= $2 THEN o.response END AS response,").Replace(rowColumns)

// ReadRowPreview is ReadRow for a page that shows payload and response up
// to limit bytes: a larger one is not read whole, only its first limit
// characters (RowPreview), so concurrent reads of large rows cost the
// bound each, not the rows' size.
func (s *Store) ReadRowPreview(ctx context.Context, db DB, key string, limit int) (*Row, RowPreview, error) {
	var p RowPreview
	row, err := first(collect[Row](ctx, db, s.sql(`SELECT `+boundedRowColumns+` FROM {s}.outbox o WHERE o.key = $1`), key, limit))
	if err != nil || row == nil {
		return row, p, err
	}
	err = db.QueryRow(ctx, s.sql(`SELECT octet_length(t.p), CASE WHEN octet_length(t.p) > $2 THEN left(t.p, $2) END,
	        coalesce(octet_length(t.r), 0), CASE WHEN octet_length(t.r) > $2 THEN left(t.r, $2) END
	   FROM {s}.outbox o CROSS JOIN LATERAL (SELECT o.payload::text AS p, o.response::text AS r) t
	  WHERE o.key = $1`), key, limit).Scan(&p.PayloadBytes, &p.Payload, &p.ResponseBytes, &p.Response)
	if err != nil {
		return nil, p, fmt.Errorf("read %s: preview: %w", key, err)
	}
	return row, p, nil
}

// RowStatus returns the status of the row of key, "" when there is none
// (pruned, or never enqueued).
func (s *Store) RowStatus(ctx context.Context, db DB, key string) (outbox.Status, error) {
	var status outbox.Status
	err := db.QueryRow(ctx, s.sql(`SELECT status FROM {s}.outbox WHERE key = $1`), key).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return status, err
}

// RunRow is a short view of one row of a run.
type RunRow struct {
	Key      string        `json:"key" db:"key"`
	Seq      int64         `json:"seq" db:"seq"`
	StepID   string        `json:"step_id" db:"step_id"`
	ToolName string        `json:"tool_name" db:"tool_name"`
	Kind     outbox.Kind   `json:"kind" db:"kind"`
	Status   outbox.Status `json:"status" db:"status"`
	Attempts int           `json:"attempts" db:"attempts"`
}

// RunRows returns up to limit rows of run in seq order.
func (s *Store) RunRows(ctx context.Context, db DB, run string, limit int) ([]RunRow, error) {
	return collect[RunRow](ctx, db, s.sql(`SELECT key, seq, step_id, tool_name, kind, status, attempts
	    FROM {s}.outbox WHERE agent_run_id = $1 ORDER BY seq LIMIT $2`), run, limit)
}

// Tombstone is what is left of a pruned row.
type Tombstone struct {
	FinalStatus outbox.Status
	PrunedAt    time.Time
}

// ReadTombstone returns the tombstone of key, or nil when there is none.
func (s *Store) ReadTombstone(ctx context.Context, db DB, key string) (*Tombstone, error) {
	var t Tombstone
	err := db.QueryRow(ctx, s.sql(`SELECT final_status, pruned_at FROM {s}.tombstones WHERE key = $1`), key).
		Scan(&t.FinalStatus, &t.PrunedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// collect runs a query and scans its rows into T by column name. It never
// returns a nil slice, so JSON shows [] rather than null.
func collect[T any](ctx context.Context, db DB, sql string, args ...any) ([]T, error) {
	rows, err := db.Query(ctx, sql, args...)
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

// each calls fn with each row of a statement as it is read.
func each[T any](ctx context.Context, db DB, sql string, args []any, fn func(*T) error) error {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		r, err := pgx.RowToStructByName[T](rows)
		if err != nil {
			return err
		}
		if err := fn(&r); err != nil {
			return err
		}
	}
	return rows.Err()
}

// first returns the first of a statement's rows, nil when it returned none.
func first[T any](rows []T, err error) (*T, error) {
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	return &rows[0], nil
}
