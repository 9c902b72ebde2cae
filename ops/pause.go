package ops

import (
	"context"
	"fmt"

	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5"
)

// Pause targets.
const (
	TargetRoute   = "route"   // a route, by tool_name
	TargetAdapter = "adapter" // an adapter instance, by name
)

// Pause is a row of the pauses table: rows of a paused route or adapter
// wait without consuming attempts.
type Pause = store.Pause

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
	ps, err := c.st.ListPauses(ctx, c.db)
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
		var err error
		if out, err = c.st.InsertPause(ctx, tx, target, name, who.Actor, who.Reason); err != nil {
			return fmt.Errorf("pause %s %s: %w", target, name, err)
		}
		if out == nil {
			return c.pauseError(ctx, tx, target, name)
		}
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
		var err error
		if out, err = c.st.DeletePause(ctx, tx, target, name); err != nil {
			return fmt.Errorf("resume %s %s: %w", target, name, err)
		}
		if out == nil {
			return &PauseError{Target: target, Name: name}
		}
		if err := c.auditTarget(ctx, tx, target, name, "operator:resume", who.Reason); err != nil {
			return err
		}
		return c.st.Notify(ctx, tx) // the paused rows are due
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *Client) pauseError(ctx context.Context, tx pgx.Tx, target, name string) error {
	p, err := c.st.ReadPause(ctx, tx, target, name)
	if err != nil {
		return fmt.Errorf("pause %s %s: %w", target, name, err)
	}
	if p == nil {
		return fmt.Errorf("pause %s %s: it was resumed while this command ran; run it again", target, name)
	}
	return &PauseError{Target: target, Name: name, Paused: true, Since: &p.PausedAt, By: p.PausedBy, Reason: p.Reason}
}

// auditTarget records a pause or resume on the chain "route:X" or "adapter:A".
func (c *Client) auditTarget(ctx context.Context, tx pgx.Tx, target, name, event, reason string) error {
	if err := c.st.AuditAppend(ctx, tx, target+":"+name, event, nullIfEmpty(reason)); err != nil {
		return fmt.Errorf("%s %s %s: audit: %w", event, target, name, err)
	}
	return nil
}
