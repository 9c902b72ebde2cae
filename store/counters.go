package store

import (
	"context"
	"fmt"
)

// EnqueueCounters are drainer.enqueue's retry-tax counters (sequences, so
// no rollback undoes them; see migrations/schema.sql).
type EnqueueCounters struct {
	Duplicates int64 // answered created = false
	Mismatches int64 // refused with 23505: same tuple, different payload
}

// ReadEnqueueCounters reads the counters.
func (s *Store) ReadEnqueueCounters(ctx context.Context, db DB) (EnqueueCounters, error) {
	var c EnqueueCounters
	err := db.QueryRow(ctx, s.sql(`SELECT
	        (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {s}.enqueue_duplicates),
	        (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {s}.enqueue_mismatches)`)).Scan(&c.Duplicates, &c.Mismatches)
	if err != nil {
		return c, fmt.Errorf("read enqueue counters: %w", err)
	}
	return c, nil
}
