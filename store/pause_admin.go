package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// Pause is a row of the pauses table: the operator's side of it (the
// daemons read the set with ReadPauses).
type Pause struct {
	Target   string    `json:"target" db:"target"`
	Name     string    `json:"name" db:"name"`
	PausedAt time.Time `json:"paused_at" db:"paused_at"`
	PausedBy string    `json:"paused_by" db:"paused_by"`
	Reason   string    `json:"reason" db:"reason"`
}

const pauseColumns = `target, name, paused_at, paused_by, reason`

// ListPauses lists the pauses, routes first, then by name.
func (s *Store) ListPauses(ctx context.Context, db DB) ([]Pause, error) {
	return collect[Pause](ctx, db, s.sql(`SELECT `+pauseColumns+`
	    FROM {s}.pauses ORDER BY target DESC, name`))
}

// InsertPause pauses target name, or returns nil when it is paused already.
func (s *Store) InsertPause(ctx context.Context, db DB, target, name, by, reason string) (*Pause, error) {
	return first(collect[Pause](ctx, db, s.sql(`INSERT INTO {s}.pauses (target, name, paused_by, reason)
	    VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING
	    RETURNING `+pauseColumns), target, name, by, reason))
}

// DeletePause lifts the pause of target name and returns it, or nil when it
// is not paused.
func (s *Store) DeletePause(ctx context.Context, db DB, target, name string) (*Pause, error) {
	return first(collect[Pause](ctx, db, s.sql(`DELETE FROM {s}.pauses WHERE target = $1 AND name = $2
	    RETURNING `+pauseColumns), target, name))
}

// ReadPause returns the pause of target name, or nil when it is not paused.
func (s *Store) ReadPause(ctx context.Context, db DB, target, name string) (*Pause, error) {
	p := Pause{Target: target, Name: name}
	err := db.QueryRow(ctx, s.sql(`SELECT paused_at, paused_by, reason FROM {s}.pauses WHERE target = $1 AND name = $2`),
		target, name).Scan(&p.PausedAt, &p.PausedBy, &p.Reason)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &p, nil
}
