package compensations

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/drainer-io/drainer/outbox"
	"github.com/jackc/pgx/v5"
)

// Map says which tool compensates which: Comps[i] undoes Tools[i].
type Map struct {
	Tools []string
	Comps []string
}

// NewMap builds a Map from tool → compensation tool.
func NewMap(comp map[string]string) Map {
	tools := make([]string, 0, len(comp))
	for t, c := range comp {
		if c != "" {
			tools = append(tools, t)
		}
	}
	sort.Strings(tools)
	m := Map{Tools: tools, Comps: make([]string, len(tools))}
	for i, t := range tools {
		m.Comps[i] = comp[t]
	}
	return m
}

// DB is what the package needs of a pool, connection or transaction.
type DB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Advance moves one run's saga forward by at most one compensation and
// returns its state ("none" when the run is not aborted, "busy" when another
// replica is advancing it).
func Advance(ctx context.Context, db DB, schema, run string, m Map) (string, error) {
	var state string
	err := db.QueryRow(ctx, fmt.Sprintf("SELECT %s.advance_saga($1, $2, $3)", schema), run, nonNil(m.Tools), nonNil(m.Comps)).Scan(&state)
	if err != nil {
		return "", fmt.Errorf("advance saga of run %q: %w", run, err)
	}
	return state, nil
}

// Swept is what one sweep did.
type Swept struct {
	// Last is the run id to continue after ("" once the end was reached).
	Last string
	// Runs counts the sagas looked at.
	Runs int
	// Busy lists runs another replica was advancing.
	Busy []string
	// Failed maps runs whose step failed to the error (noted on the run).
	Failed map[string]string
	// Halted lists runs whose saga halted in this sweep or before.
	Halted []string
}

// Sweep advances up to limit active sagas (waiting or compensating) whose run
// id sorts after after, each in a subtransaction of its own, so one failing
// saga step never rolls back another run's progress. Halted sagas are left
// to `drainer resolve`; done ones are finished. Calling it again with
// Swept.Last visits every active saga in turn, however many there are.
func Sweep(ctx context.Context, db DB, schema string, m Map, after string, limit int) (Swept, error) {
	out := Swept{Failed: map[string]string{}}
	rows, err := db.Query(ctx, fmt.Sprintf("SELECT agent_run_id, state FROM %s.sweep_sagas($1, $2, $3, $4)", schema),
		after, limit, nonNil(m.Tools), nonNil(m.Comps))
	if err != nil {
		return out, fmt.Errorf("saga sweep: %w", err)
	}
	var run, state string
	_, err = pgx.ForEachRow(rows, []any{&run, &state}, func() error {
		out.Runs++
		out.Last = run
		switch {
		case state == "busy":
			out.Busy = append(out.Busy, run)
		case state == outbox.SagaHalted:
			out.Halted = append(out.Halted, run)
		case strings.HasPrefix(state, "error: "):
			out.Failed[run] = strings.TrimPrefix(state, "error: ")
		}
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("saga sweep: %w", err)
	}
	if out.Runs < limit {
		out.Last = ""
	}
	return out, nil
}

// QueueAlerts queues one alert row per compensation_failed row that has none
// yet (keyed by the compensation row's key, so each is alerted exactly once),
// and returns how many it queued. With runs, only those runs' rows are
// looked at; nil looks at every compensation_failed row.
func QueueAlerts(ctx context.Context, db DB, schema string, runs []string) (int, error) {
	rows, err := db.Query(ctx, fmt.Sprintf(`
	    WITH failed AS (
	        SELECT c.key, c.agent_run_id, c.step_id, c.tool_name, c.forward_key, c.attempts, c.last_error,
	               %[1]s.idempotency_key($1, c.key, $2, c.agent_run_id) AS alert_key
	          FROM %[1]s.outbox c
	         WHERE c.status = 'compensation_failed' AND c.kind = 'compensation'
	           AND ($3::text[] IS NULL OR c.agent_run_id = ANY($3::text[]))
	    ), payloads AS (
	        SELECT f.*, jsonb_build_object(
	                   'event', 'compensation_failed',
	                   'key', f.key, 'agent_run_id', f.agent_run_id, 'step_id', f.step_id,
	                   'tool_name', f.tool_name, 'forward_key', f.forward_key,
	                   'attempts', f.attempts, 'last_error', f.last_error) AS payload
	          FROM failed f
	         WHERE NOT EXISTS (SELECT 1 FROM %[1]s.outbox a WHERE a.key = f.alert_key)
	           AND NOT EXISTS (SELECT 1 FROM %[1]s.tombstones t WHERE t.key = f.alert_key)
	    )
	    INSERT INTO %[1]s.outbox (key, agent_run_id, step_id, tool_name, business_scope, kind, payload, payload_hash)
	    SELECT p.alert_key, $1, p.key, $2, p.agent_run_id, 'forward', p.payload, %[1]s.payload_hash(p.payload)
	      FROM payloads p
	    ON CONFLICT ON CONSTRAINT outbox_key_unique DO NOTHING
	    RETURNING key`, schema), outbox.AlertRun, outbox.AlertTool, runs)
	if err != nil {
		return 0, fmt.Errorf("queue compensation_failed alerts: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("queue compensation_failed alerts: %w", err)
	}
	return len(keys), nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
