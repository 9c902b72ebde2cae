package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Pause targets.
const (
	TargetRoute   = "route"   // a route, by tool_name
	TargetAdapter = "adapter" // an adapter instance, by name
)

// Pause is a row of the pauses table: rows of a paused route or adapter
// wait without consuming attempts.
type Pause struct {
	Target   string    `json:"target" db:"target"`
	Name     string    `json:"name" db:"name"`
	PausedAt time.Time `json:"paused_at" db:"paused_at"`
	PausedBy string    `json:"paused_by" db:"paused_by"`
	Reason   string    `json:"reason" db:"reason"`
}

func validTarget(target, name string) error {
	if target != TargetRoute && target != TargetAdapter {
		return fmt.Errorf("pause target %q is not route or adapter", target)
	}
	if name == "" {
		return fmt.Errorf("a %s name must not be empty", target)
	}
	return nil
}

// Pauses lists the current pauses, routes first.
func (c *Client) Pauses(ctx context.Context) ([]Pause, error) {
	ps, err := collect[Pause](ctx, c.db, c.sql(`SELECT target, name, paused_at, paused_by, reason
	    FROM {s}.pauses ORDER BY target DESC, name`))
	if err != nil {
		return nil, fmt.Errorf("read pauses: %w", err)
	}
	return ps, nil
}

// Pause pauses a route or an adapter on every replica (they read the
// pauses table every few seconds). Pausing what is paused already is a
// *PauseError.
func (c *Client) Pause(ctx context.Context, target, name string, who Who) (*Pause, error) {
	if err := validTarget(target, name); err != nil {
		return nil, err
	}
	var out *Pause
	err := c.begin(ctx, "pause", who, func(tx pgx.Tx) error {
		ps, err := collect[Pause](ctx, tx, c.sql(`INSERT INTO {s}.pauses (target, name, paused_by, reason)
		    VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING
		    RETURNING target, name, paused_at, paused_by, reason`), target, name, who.Actor, who.Reason)
		if err != nil {
			return fmt.Errorf("pause %s %s: %w", target, name, err)
		}
		if len(ps) == 0 {
			return c.pauseError(ctx, tx, target, name)
		}
		out = &ps[0]
		return c.auditTarget(ctx, tx, target, name, "operator:pause", who.Reason)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Resume lifts a pause and returns it. Resuming what is not paused is a
// *PauseError.
func (c *Client) Resume(ctx context.Context, target, name string, who Who) (*Pause, error) {
	if err := validTarget(target, name); err != nil {
		return nil, err
	}
	var out *Pause
	err := c.begin(ctx, "resume", who, func(tx pgx.Tx) error {
		ps, err := collect[Pause](ctx, tx, c.sql(`DELETE FROM {s}.pauses WHERE target = $1 AND name = $2
		    RETURNING target, name, paused_at, paused_by, reason`), target, name)
		if err != nil {
			return fmt.Errorf("resume %s %s: %w", target, name, err)
		}
		if len(ps) == 0 {
			return &PauseError{Target: target, Name: name}
		}
		out = &ps[0]
		if err := c.auditTarget(ctx, tx, target, name, "operator:resume", who.Reason); err != nil {
			return err
		}
		return c.notify(ctx, tx) // the paused rows are due
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *Client) pauseError(ctx context.Context, tx pgx.Tx, target, name string) error {
	var p Pause
	err := tx.QueryRow(ctx, c.sql(`SELECT paused_at, paused_by, reason FROM {s}.pauses WHERE target = $1 AND name = $2`),
		target, name).Scan(&p.PausedAt, &p.PausedBy, &p.Reason)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("pause %s %s: it was resumed while this command ran; run it again", target, name)
	}
	if err != nil {
		return fmt.Errorf("pause %s %s: %w", target, name, err)
	}
	return &PauseError{Target: target, Name: name, Paused: true, Since: &p.PausedAt, By: p.PausedBy, Reason: p.Reason}
}

// auditTarget records a pause or resume on the chain "route:X" or "adapter:A".
func (c *Client) auditTarget(ctx context.Context, tx pgx.Tx, target, name, event, reason string) error {
	if _, err := tx.Exec(ctx, c.sql(`SELECT {s}.audit_append($1, $2, $3)`), target+":"+name, event, nullIfEmpty(reason)); err != nil {
		return fmt.Errorf("%s %s %s: audit: %w", event, target, name, err)
	}
	return nil
}
