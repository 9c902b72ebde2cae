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
// succeeded rows (docs/reference.md §6). A run with no row is a *NotFoundError.
func (c *Client) Abort(ctx context.Context, run string, who Who) (*Aborted, error) {
	if strings.TrimSpace(who.Reason) == "" {
		return nil, errors.New("abort needs a reason")
	}
	out := &Aborted{AgentRunID: run}
	err := c.begin(ctx, "abort", who, func(tx pgx.Tx) error {
		exists, err := c.st.RunExists(ctx, tx, run)
		if err != nil {
			return fmt.Errorf("abort %s: %w", run, err)
		}
		if !exists {
			return &NotFoundError{What: "row with agent_run_id " + run}
		}
		rec, err := c.st.ReadAbort(ctx, tx, run)
		if err != nil {
			return fmt.Errorf("abort %s: %w", run, err)
		}
		if out.Cancelled, err = c.st.AbortRun(ctx, tx, run, who.Reason, who.Actor); err != nil {
			return fmt.Errorf("abort %s: %w", run, err)
		}
		out.AlreadyAborted = rec != nil
		if rec == nil {
			if rec, err = c.st.ReadAbort(ctx, tx, run); err != nil {
				return fmt.Errorf("abort %s: %w", run, err)
			}
			if rec == nil {
				return fmt.Errorf("abort %s: %w", run, pgx.ErrNoRows)
			}
		}
		out.AbortedAt, out.AbortedBy, out.AbortReason = rec.At, rec.By, rec.Reason
		if err := c.st.AuditAppend(ctx, tx, "run:"+run, "operator:abort", &who.Reason); err != nil {
			return fmt.Errorf("abort %s: audit: %w", run, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
