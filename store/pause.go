package store

import (
	"context"
	"fmt"

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
