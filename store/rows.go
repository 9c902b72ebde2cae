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
	add := conditions(args, &conds)
	if f.Status != "" {
		add("o.status = $?", f.Status)
	}
	if f.Run != "" {
		add("o.agent_run_id = $?", f.Run)
	}
	f.queueConds(add, "o")
	if len(f.Payload) > 0 {
		add("o.payload @> $?::jsonb", string(f.Payload))
	}
	if f.Keys != nil {
		add("o.key = ANY($?::text[])", f.Keys)
	}
	return strings.Join(conds, " AND ")
}

// queueConds adds the conditions of Tool, OlderThan and Scope on relation
// r: the outbox, or the queue, whose rows carry copies of their intent's
// tool_name and business_scope.
func (f Filter) queueConds(add func(cond string, v any), r string) {
	if f.Tool != "" {
		add(r+".tool_name = $?", f.Tool)
	}
	if f.OlderThan > 0 {
		add(r+".updated_at < now() - $?::bigint * interval '1 microsecond'", f.OlderThan.Microseconds())
	}
	if f.Scope != "" {
		add(r+".business_scope = $?", f.Scope)
	}
}

// conditions returns a function that appends a condition to conds, its
// value to args and its $? as that value's placeholder.
func conditions(args *[]any, conds *[]string) func(cond string, v any) {
	return func(cond string, v any) {
		*args = append(*args, v)
		*conds = append(*conds, strings.ReplaceAll(cond, "$?", "$"+strconv.Itoa(len(*args))))
	}
}

// listRowsSQL pages through the rows matching a filter in seq order: its
// columns (first %s) and its conditions (second %s).
const listRowsSQL = `SELECT %s FROM {s}.outbox o
     WHERE o.seq > $1 AND %s ORDER BY o.seq LIMIT $2`

// listPendingSQL is listRowsSQL for a filter of pending rows whose other
// conditions are on the queue's own columns (listsPending): its columns
// (%[1]s), and the candidates of its page in the hot generations (%[2]s)
// and in queue_settled (%[3]s), each pendingPartSQL.
//
// Pending rows are the newest: the rows before them in seq order have
// mostly settled. Walked in seq order and filtered by status, as
// listRowsSQL is planned when the statistics say most rows are pending
// (taken while a generation filled, before its rows settled) or assume
// them spread evenly over seq (they never are), a page read every settled
// row before the first pending one, and the intent of each: 0.3 s at 10^6
// rows, 100 of them pending. Here each part of the queue gives the first
// $2 matching rows past the cursor it holds (or all of them), and the page
// is the first $2 of these in seq order, then read whole by seq.
const listPendingSQL = `WITH %[2]s, %[3]s, page AS MATERIALIZED (
    SELECT seq FROM hot UNION ALL SELECT seq FROM moved ORDER BY seq LIMIT $2
)
SELECT %[1]s FROM page JOIN {s}.outbox o ON o.seq = page.seq ORDER BY o.seq`

// pendingPartSQL reads the candidates of a page of pending rows in one part
// of the queue: its name (%[1]s), its generations (%[2]s) and the filter's
// conditions on queue q after its status (%[3]s). The hot generations hold
// the open rows; queue_settled holds settled rows, and the rows a requeue
// made pending again there. Each part is read in one of two ways, whichever
// holds its candidates:
//
//   - walk: its first $3 rows past the cursor in seq order, whatever their
//     status. When they hold $2 matching rows (or are all its rows left),
//     these are its candidates: a backlog's pages cost their own rows.
//   - otherwise, its every pending row past the cursor, through the pending
//     index (queue_due_idx). The index order asked for keeps the plan on
//     that index, and OFFSET 0 keeps the cursor off the primary key, whose
//     range would walk settled rows again: only rows that can match are
//     read.
const pendingPartSQL = `%[1]s_walk AS MATERIALIZED (
    SELECT q.seq, q.status = {StatusPending}%[3]s AS hit FROM {s}.queue q
     WHERE %[2]s AND q.seq > $1 ORDER BY q.seq LIMIT $3
), %[1]s_held AS (
    SELECT count(*) FILTER (WHERE hit) >= $2 OR count(*) < $3 AS page FROM %[1]s_walk
), %[1]s AS (
    SELECT w.seq FROM %[1]s_walk w WHERE w.hit AND (SELECT page FROM %[1]s_held)
     UNION ALL
    SELECT d.seq FROM (SELECT q.seq FROM {s}.queue q WHERE %[2]s AND q.status = {StatusPending}%[3]s
                        ORDER BY q.next_attempt_at, q.seq OFFSET 0) d
     WHERE d.seq > $1 AND NOT (SELECT page FROM %[1]s_held)
)`

// listWalk is how many rows pendingPartSQL walks past the cursor for a
// page of limit rows: a part's candidates are read from them when at
// least one in 16 of them matches.
func listWalk(limit int) int { return 16 * max(limit, 1) }

// listPlanSettings pin listPendingSQL's plan, whatever the statistics
// say: with no pass over a table or a bitmap, and no hash or merge join,
// the walk reads the generations' primary keys in seq order, the pending
// rows are read in their index's order, and the page is joined to its
// intents by seq (a merge join walked every intent before the page's).
// JIT is off: disabled costs would cross jit_above_cost.
const listPlanSettings = `SELECT set_config('enable_seqscan', 'off', true),
       set_config('enable_bitmapscan', 'off', true),
       set_config('enable_hashjoin', 'off', true),
       set_config('enable_mergejoin', 'off', true),
       set_config('jit', 'off', true)`

// listsPending reports whether f lists pending rows with no condition on
// the intent (run, payload, keys: their own index, or a containment test
// of each row, serve those): listPendingSQL reads its pages.
func (f Filter) listsPending() bool {
	return f.Status == outbox.StatusPending && f.Run == "" && len(f.Payload) == 0 && f.Keys == nil
}

// listSQL returns the statement reading a page of up to limit rows
// matching f past after, with columns, its arguments, and the settings it
// runs under ("" for none).
func (s *Store) listSQL(columns string, f Filter, after int64, limit int) (string, []any, string) {
	if !f.listsPending() {
		args := []any{after, limit}
		return s.sql(fmt.Sprintf(listRowsSQL, columns, f.where(&args))), args, ""
	}
	args := []any{after, limit, listWalk(limit)}
	var conds []string
	f.queueConds(conditions(&args, &conds), "q")
	and := ""
	if len(conds) > 0 {
		and = " AND " + strings.Join(conds, " AND ")
	}
	return s.sql(fmt.Sprintf(listPendingSQL, columns, fmt.Sprintf(pendingPartSQL, "hot", "q.gen <> 0", and),
		fmt.Sprintf(pendingPartSQL, "moved", "q.gen = 0", and))), args, listPlanSettings
}

// withSettings runs fn on db under settings (none when ""): in a
// transaction of its own, or a savepoint of db's, rolled back after fn,
// so that they touch nothing else of the caller's transaction. A db that
// can begin neither runs fn as it is.
func withSettings(ctx context.Context, db DB, settings string, fn func(DB) error) error {
	b, ok := db.(interface {
		Begin(context.Context) (pgx.Tx, error)
	})
	if settings == "" || !ok {
		return fn(db)
	}
	tx, err := b.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, settings); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Rollback(ctx)
}

// EachRow calls fn with each of up to limit rows matching f with seq >
// after, in seq order, whole: payload and response included (`drainer list
// --output json` prints them). Each row is handed over as it arrives, so a
// caller that keeps none holds one row, not the page: a page of rows as
// large as drainer.max_payload_bytes would otherwise be held whole. An
// error of fn stops the read and is returned. A list that shows neither
// payload nor response reads ListRowSummaries.
func (s *Store) EachRow(ctx context.Context, db DB, f Filter, after int64, limit int, fn func(*Row) error) error {
	sql, args, settings := s.listSQL(rowColumns, f, after, limit)
	return withSettings(ctx, db, settings, func(db DB) error { return each(ctx, db, sql, args, fn) })
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
	sql, args, settings := s.listSQL(summaryColumns, f, after, limit)
	var rows []RowSummary
	err := withSettings(ctx, db, settings, func(db DB) error {
		var err error
		rows, err = collect[RowSummary](ctx, db, sql, args...)
		return err
	})
	return rows, err
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
