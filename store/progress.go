package store

import (
	"context"

	"github.com/drainer-io/drainer/outbox"
	"github.com/jackc/pgx/v5"
)

// Progress is how far a drain has come: `drainer demo` watches it.
type Progress struct {
	Total int
	// Settled counts the rows neither pending nor in flight.
	Settled int
	// OpenSagas counts the aborted runs whose saga is not done.
	OpenSagas int
}

// ReadProgress measures the drain. It counts every row: meant for small
// outboxes (the demo's), not for a production backlog (see Snapshot).
func (s *Store) ReadProgress(ctx context.Context, db DB) (Progress, error) {
	var p Progress
	err := db.QueryRow(ctx, s.sql(`SELECT count(*),
	        count(*) FILTER (WHERE status NOT IN ({StatusPending}, {StatusInFlight})),
	        (SELECT count(*) FROM {s}.runs WHERE saga_state <> {SagaDone})
	   FROM {s}.outbox`)).Scan(&p.Total, &p.Settled, &p.OpenSagas)
	return p, err
}

// StatusKindCount is the number of rows of one status and kind, and the
// attempts they consumed.
type StatusKindCount struct {
	Status         outbox.Status
	Kind           outbox.Kind
	Rows, Attempts int
}

// CountByStatusKind counts the rows other than alerts (outbox.AlertRun) by
// status and kind: forward rows first, then by count, largest first.
func (s *Store) CountByStatusKind(ctx context.Context, db DB) ([]StatusKindCount, error) {
	rows, err := db.Query(ctx, s.sql(`SELECT status, kind, count(*), sum(attempts) FROM {s}.outbox
	    WHERE agent_run_id <> $1 GROUP BY status, kind ORDER BY kind DESC, count(*) DESC`), outbox.AlertRun)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (StatusKindCount, error) {
		var c StatusKindCount
		return c, r.Scan(&c.Status, &c.Kind, &c.Rows, &c.Attempts)
	})
}

// CountInStatus counts the rows whose status is one of statuses. It counts
// every such row: meant for a drain's end (the bench's, the demo's), when
// few are left.
func (s *Store) CountInStatus(ctx context.Context, db DB, statuses ...outbox.Status) (int, error) {
	var n int
	err := db.QueryRow(ctx, s.sql(`SELECT count(*) FROM {s}.outbox WHERE status = ANY($1)`),
		outbox.StatusStrings(statuses...)).Scan(&n)
	return n, err
}
