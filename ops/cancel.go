package ops

import (
	"context"
	"fmt"

	"github.com/drainer-io/drainer/outbox"
	"github.com/jackc/pgx/v5"
)

// Cancel turns the pending forward row of key into cancelled (see the
// package rules). A refusal is a *TransitionError; an unknown key a
// *NotFoundError.
func (c *Client) Cancel(ctx context.Context, key string, who Who, dryRun bool) (*Result, error) {
	return c.runKey(ctx, canceller{c: c, who: who}, who, key, dryRun)
}

// CancelWhere cancels the pending rows matching f, which must name a run;
// f.Status, if set, must be pending.
func (c *Client) CancelWhere(ctx context.Context, f Filter, who Who, o BulkOptions) (*Result, error) {
	if f.Run == "" {
		return nil, fmt.Errorf("cancel by filter needs a run (--run)")
	}
	if f.Status == "" {
		f.Status = outbox.StatusPending
	}
	if err := CancelStatus(f.Status); err != nil {
		return nil, err
	}
	return c.runBulk(ctx, canceller{c: c, who: who}, who, f, o)
}

// CancelStatus reports whether rows of status may be cancelled in bulk.
func CancelStatus(status outbox.Status) error {
	if err := ValidateStatus(status); err != nil {
		return err
	}
	if status != outbox.StatusPending {
		return fmt.Errorf("%s rows cannot be cancelled (%s); cancel takes pending rows", status, cancelWhy(candidate{Status: status, Kind: outbox.KindForward}))
	}
	return nil
}

// cancelWhy is why a row cannot be cancelled, "" if it can.
func cancelWhy(r candidate) string {
	switch r.Status {
	case outbox.StatusPending:
		if r.Kind == outbox.KindCompensation {
			return "it is a compensation row: cancelling it would mark its forward row compensated without undoing the effect"
		}
		return ""
	case outbox.StatusInFlight:
		return leaseWhy(r)
	case outbox.StatusOutcomeUnknown:
		return "the request may have had its effect; settle it with drainer resolve KEY --outcome"
	case outbox.StatusCompensationFailed:
		return "its compensation cannot succeed; undo the effect by hand, then drainer resolve KEY --note"
	case outbox.StatusSucceeded:
		return "final already: the effect happened; to undo it, abort its run"
	}
	return "final already"
}

type canceller struct {
	c   *Client
	who Who
}

func (canceller) verb() string { return "cancel" }

func (canceller) plan(_ context.Context, _ pgx.Tx, cands []candidate, _ extender, _ bool) (*plan, error) {
	p := &plan{}
	for _, r := range cands {
		if why := cancelWhy(r); why != "" {
			p.refused = append(p.refused, refusal(r, "cancel", why))
			continue
		}
		ch := change(r, outbox.StatusCancelled, r.Attempts)
		if r.Attempts > 0 {
			ch.Warning = fmt.Sprintf("attempted %d time(s): the request may have had its effect; cancelling stops retries, it undoes nothing", r.Attempts)
		}
		p.changes = append(p.changes, ch)
	}
	return p, nil
}

// message is the last_error of a cancelled row.
func (x canceller) message() string {
	msg := "cancelled by " + x.who.Actor
	if x.who.Reason != "" {
		msg += ": " + x.who.Reason
	}
	return msg
}

func (x canceller) apply(ctx context.Context, tx pgx.Tx, p *plan) error {
	if len(p.changes) == 0 {
		return nil
	}
	keys := make([]string, len(p.changes))
	for i, ch := range p.changes {
		keys[i] = ch.Key
	}
	done, err := x.c.st.Cancel(ctx, tx, keys, x.message())
	if err != nil {
		return fmt.Errorf("cancel: %w", err)
	}
	if err := x.c.settleRaces(ctx, tx, p, done, "cancel"); err != nil {
		return err
	}
	// A cancelled row may be what an aborted run's saga waits for.
	return x.c.st.Notify(ctx, tx)
}
