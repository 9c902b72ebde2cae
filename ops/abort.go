package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Aborted is the result of Abort.
type Aborted struct {
	AgentRunID string `json:"agent_run_id"`
	// Cancelled counts the never-attempted forward rows cancelled now.
	Cancelled int `json:"cancelled"`
	// AlreadyAborted: the run was aborted before; AbortedAt, AbortedBy and
	// AbortReason are then those of the first abort.
	AlreadyAborted bool      `json:"already_aborted"`
	AbortedAt      time.Time `json:"aborted_at"`
	AbortedBy      string    `json:"aborted_by"`
	AbortReason    string    `json:"abort_reason"`
}

// Abort aborts a run: its never-attempted forward rows are cancelled, later
// enqueues into it are created cancelled, and the daemon compensates its
// succeeded rows (CONTRACT §6). A run with no row is a *NotFoundError.
func (c *Client) Abort(ctx context.Context, run string, who Who) (*Aborted, error) {
	if strings.TrimSpace(who.Reason) == "" {
		return nil, errors.New("abort needs a reason")
	}
	out := &Aborted{AgentRunID: run}
	err := c.begin(ctx, "abort", who, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, c.sql(`SELECT EXISTS (SELECT 1 FROM {s}.outbox WHERE agent_run_id = $1)`), run).
			Scan(&exists); err != nil {
			return fmt.Errorf("abort %s: %w", run, err)
		}
		if !exists {
			return &NotFoundError{What: "row with agent_run_id " + run}
		}
		err := tx.QueryRow(ctx, c.sql(`SELECT aborted_at, aborted_by, abort_reason FROM {s}.runs WHERE agent_run_id = $1`), run).
			Scan(&out.AbortedAt, &out.AbortedBy, &out.AbortReason)
		switch {
		case err == nil:
			out.AlreadyAborted = true
		case !errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("abort %s: %w", run, err)
		}
		if err := tx.QueryRow(ctx, c.sql(`SELECT {s}.abort_run_internal($1, $2, $3)`), run, who.Reason, who.Actor).
			Scan(&out.Cancelled); err != nil {
			return fmt.Errorf("abort %s: %w", run, err)
		}
		if !out.AlreadyAborted {
			if err := tx.QueryRow(ctx, c.sql(`SELECT aborted_at, aborted_by, abort_reason FROM {s}.runs WHERE agent_run_id = $1`), run).
				Scan(&out.AbortedAt, &out.AbortedBy, &out.AbortReason); err != nil {
				return fmt.Errorf("abort %s: %w", run, err)
			}
		}
		if _, err := tx.Exec(ctx, c.sql(`SELECT {s}.audit_append('run:' || $1, 'operator:abort', $2)`), run, who.Reason); err != nil {
			return fmt.Errorf("abort %s: audit: %w", run, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
