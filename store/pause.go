package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Pauses is the set of paused routes (by tool_name) and adapters.
type Pauses struct {
	Routes   map[string]bool
	Adapters map[string]bool
}

// ReadPauses reads the pauses table.
func (s *Store) ReadPauses(ctx context.Context, db DB) (Pauses, error) {
	p := Pauses{Routes: map[string]bool{}, Adapters: map[string]bool{}}
	rows, err := db.Query(ctx, s.sql("SELECT target, name FROM {s}.pauses"))
	if err != nil {
		return p, fmt.Errorf("read pauses: %w", err)
	}
	var target, name string
	_, err = pgx.ForEachRow(rows, []any{&target, &name}, func() error {
		if target == "route" {
			p.Routes[name] = true
		} else {
			p.Adapters[name] = true
		}
		return nil
	})
	if err != nil {
		return p, fmt.Errorf("read pauses: %w", err)
	}
	return p, nil
}

// RecentResumes returns those of keys ("route:X", "adapter:A": the chains
// an operator's pause and resume are recorded on) whose audit records a
// resume within the last within, on the database's clock. An engine that
// starts after a resume wakes the rows a pause deferred (drainer's
// pauseWatcher): no engine that saw the resume was there to do it.
func (s *Store) RecentResumes(ctx context.Context, db DB, keys []string, within time.Duration) ([]string, error) {
	rows, err := db.Query(ctx, s.sql(`SELECT DISTINCT key FROM {s}.audit
	    WHERE key = ANY($1::text[]) AND event = 'operator:resume' AND at > now() - $2 * interval '1 millisecond'`),
		keys, within.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("read recent resumes: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read recent resumes: %w", err)
	}
	return out, nil
}
