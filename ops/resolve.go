package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/drainer-io/drainer/outbox"
	"github.com/jackc/pgx/v5"
)

// Resolution is what a human found out about a parked row.
type Resolution struct {
	// Note says what was checked or done; it is kept in the row's note and
	// recorded as the audit reason.
	Note string
	// Outcome is succeeded or failed, for an outcome_unknown row only.
	Outcome outbox.Status
}

// Resolved is the result of Resolve.
type Resolved struct {
	Key        string        `json:"key"`
	AgentRunID string        `json:"agent_run_id"`
	Kind       outbox.Kind   `json:"kind"`
	FromStatus outbox.Status `json:"from_status"`
	Status     outbox.Status `json:"status"`
	Note       string        `json:"note"`
	// ForwardKey and ForwardStatus: the forward row of a resolved
	// compensation row, and its status afterwards.
	ForwardKey    string        `json:"forward_key,omitempty"`
	ForwardStatus outbox.Status `json:"forward_status,omitempty"`
	// RunAborted: the row's run is aborted (by this resolution, for a
	// forward row resolved failed); SagaState is then its saga's state.
	RunAborted bool             `json:"run_aborted"`
	SagaState  outbox.SagaState `json:"saga_state,omitempty"`
	// Cancelled counts the never-attempted rows of the run cancelled by an
	// abort this resolution caused.
	Cancelled int `json:"cancelled"`
}

// Resolve settles an outcome_unknown or compensation_failed row (see the
// package rules). Other statuses are a *TransitionError.
func (c *Client) Resolve(ctx context.Context, key string, r Resolution, who Who) (*Resolved, error) {
	if strings.TrimSpace(r.Note) == "" {
		return nil, errors.New("resolve needs a note saying what was checked or done")
	}
	if r.Outcome != "" && r.Outcome != outbox.StatusSucceeded && r.Outcome != outbox.StatusFailed {
		return nil, fmt.Errorf("outcome %q is not succeeded or failed", r.Outcome)
	}
	who.Reason = r.Note
	var out *Resolved
	err := c.begin(ctx, "resolve", who, func(tx pgx.Tx) error {
		row, err := c.row(ctx, tx, key)
		var nf *NotFoundError
		if errors.As(err, &nf) {
			return c.missing(ctx, tx, "resolve", key)
		}
		if err != nil {
			return err
		}
		out = &Resolved{Key: key, AgentRunID: row.AgentRunID, Kind: row.Kind, FromStatus: row.Status, Note: r.Note}
		switch row.Status {
		case outbox.StatusOutcomeUnknown:
			err = c.resolveUnknown(ctx, tx, row, r, who, out)
		case outbox.StatusCompensationFailed:
			err = c.resolveCompensation(ctx, tx, row, r, who, out)
		default:
			return &TransitionError{Key: key, Status: row.Status, Action: "resolve",
				Why: "resolve settles outcome_unknown and compensation_failed rows only"}
		}
		if err != nil {
			return err
		}
		return c.continueSaga(ctx, tx, out)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *Client) resolveUnknown(ctx context.Context, tx pgx.Tx, row *Row, r Resolution, who Who, out *Resolved) error {
	if r.Outcome == "" {
		return ErrOutcomeRequired
	}
	to := r.Outcome
	if to == outbox.StatusFailed && row.Kind == outbox.KindCompensation {
		to = outbox.StatusCompensationFailed // a compensation that cannot succeed halts its saga
	}
	// The provider error that parked the row is stale once a human settled
	// it: succeeded clears it (the note says what was found), failed
	// replaces it with who resolved it and why.
	var lastError *string
	if to != outbox.StatusSucceeded {
		msg := fmt.Sprintf("resolved as failed by %s: %s", who.Actor, r.Note)
		lastError = &msg
	}
	// The count of rows cancelled by an abort the failure triggers.
	before, err := c.st.CountCancelled(ctx, tx, row.AgentRunID)
	if err != nil {
		return fmt.Errorf("resolve %s: %w", row.Key, err)
	}
	if err := c.settle(ctx, tx, row.Key, row.Status, to, lastError, r.Note); err != nil {
		return err
	}
	out.Status = to
	if row.Kind == outbox.KindCompensation && row.ForwardKey != nil {
		out.ForwardKey = *row.ForwardKey
		if out.ForwardStatus, err = c.st.RowStatus(ctx, tx, out.ForwardKey); err != nil {
			return fmt.Errorf("resolve %s: forward row: %w", row.Key, err)
		}
	}
	after, err := c.st.CountCancelled(ctx, tx, row.AgentRunID)
	if err != nil {
		return fmt.Errorf("resolve %s: %w", row.Key, err)
	}
	out.Cancelled = after - before
	return nil
}

func (c *Client) resolveCompensation(ctx context.Context, tx pgx.Tx, row *Row, r Resolution, who Who, out *Resolved) error {
	if r.Outcome != "" {
		return ErrOutcomeNotAllowed
	}
	msg := fmt.Sprintf("resolved by %s: %s", who.Actor, r.Note)
	if err := c.settle(ctx, tx, row.Key, row.Status, outbox.StatusCancelled, &msg, r.Note); err != nil {
		return err
	}
	out.Status = outbox.StatusCancelled
	if row.ForwardKey == nil {
		return nil
	}
	out.ForwardKey = *row.ForwardKey
	var err error
	if out.ForwardStatus, err = c.st.MarkCompensated(ctx, tx, out.ForwardKey); err != nil {
		return fmt.Errorf("resolve %s: mark forward row %s compensated: %w", row.Key, out.ForwardKey, err)
	}
	return nil
}

// settle changes key from → to, conditionally, keeping the note.
func (c *Client) settle(ctx context.Context, tx pgx.Tx, key string, from, to outbox.Status, lastError *string, note string) error {
	done, err := c.st.Settle(ctx, tx, key, from, to, lastError, note)
	if err != nil {
		return fmt.Errorf("resolve %s: %w", key, err)
	}
	if !done {
		now, err := c.st.RowStatus(ctx, tx, key)
		if err != nil {
			return fmt.Errorf("resolve %s: %w", key, err)
		}
		return raced(key, "resolve", now)
	}
	return nil
}

// continueSaga lets the saga of an aborted run move on: its state goes
// back to waiting, so the daemons' sweep advances it, and they are woken.
func (c *Client) continueSaga(ctx context.Context, tx pgx.Tx, out *Resolved) error {
	var err error
	if out.SagaState, err = c.st.ContinueSaga(ctx, tx, out.AgentRunID); err != nil {
		return fmt.Errorf("resolve %s: saga: %w", out.Key, err)
	}
	out.RunAborted = out.SagaState != ""
	return c.st.Notify(ctx, tx)
}
