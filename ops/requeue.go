package ops

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/jackc/pgx/v5"
)

// Requeue makes the row of key pending and due now, or at its not_before
// floor unless o.IgnoreRetryAfter (see the package rules); o.DryRun changes
// nothing. A refusal is a *TransitionError; an unknown key a *NotFoundError.
func (c *Client) Requeue(ctx context.Context, key string, who Who, o BulkOptions) (*Result, error) {
	return c.runKey(ctx, requeuer{c: c, who: who, ignoreFloor: o.IgnoreRetryAfter}, who, key, o.DryRun)
}

// RequeueWhere requeues every row matching f, which must name a status
// (failed, pending or cancelled), in batches. Rows it may not requeue are
// listed in Result.Refused; the others are requeued regardless.
func (c *Client) RequeueWhere(ctx context.Context, f Filter, who Who, o BulkOptions) (*Result, error) {
	if err := RequeueStatus(f.Status); err != nil {
		return nil, err
	}
	return c.runBulk(ctx, requeuer{c: c, who: who, ignoreFloor: o.IgnoreRetryAfter}, who, f, o)
}

// RequeueStatus reports whether rows of status may be requeued in bulk.
func RequeueStatus(status outbox.Status) error {
	if err := ValidateStatus(status); err != nil {
		return err
	}
	switch status {
	case outbox.StatusFailed, outbox.StatusPending, outbox.StatusCancelled:
		return nil
	}
	return fmt.Errorf("%s rows cannot be requeued (%s); requeue takes failed, pending or cancelled rows",
		status, requeueWhy(candidate{Status: status}))
}

// requeueWhy is why a row of its status cannot be requeued, "" if it can.
func requeueWhy(r candidate) string {
	switch r.Status {
	case outbox.StatusSucceeded:
		return "the effect happened; requeueing would repeat it"
	case outbox.StatusCompensated:
		return "its effect was undone by the saga; requeueing would redo it"
	case outbox.StatusInFlight:
		return leaseWhy(r)
	case outbox.StatusOutcomeUnknown:
		return "the request may have had its effect; settle it with drainer resolve KEY --outcome"
	case outbox.StatusCompensationFailed:
		return "its compensation cannot succeed; undo the effect by hand, then drainer resolve KEY --note"
	case outbox.StatusCancelled:
		if r.Kind == outbox.KindCompensation {
			return "a cancelled compensation row was resolved by a human; requeueing it would undo the effect twice"
		}
	}
	return ""
}

type requeuer struct {
	c           *Client
	who         Who
	ignoreFloor bool
}

func (requeuer) verb() string { return "requeue" }

func (q requeuer) plan(ctx context.Context, tx pgx.Tx, cands []candidate, ext extender, dry bool) (*plan, error) {
	p := &plan{}
	var ok []candidate
	for _, r := range cands {
		if why := requeueWhy(r); why != "" {
			p.refused = append(p.refused, refusal(r, "requeue", why))
		} else {
			ok = append(ok, r)
		}
	}
	// Failed and cancelled rows may belong to an aborted run.
	var runIDs []string
	seenRun := map[string]bool{}
	for _, r := range ok {
		if r.Status != outbox.StatusPending && !seenRun[r.AgentRunID] {
			seenRun[r.AgentRunID] = true
			runIDs = append(runIDs, r.AgentRunID)
		}
	}
	runs, err := q.c.abortedRuns(ctx, tx, runIDs, !dry)
	if err != nil {
		return nil, err
	}
	if ext != nil && len(runs) > 0 {
		// The failed rows of an aborted run are requeued together or not at all.
		var withFailed []string
		for _, r := range ok {
			if _, aborted := runs[r.AgentRunID]; aborted && r.Status == outbox.StatusFailed && !slices.Contains(withFailed, r.AgentRunID) {
				withFailed = append(withFailed, r.AgentRunID)
			}
		}
		if len(withFailed) > 0 {
			more, err := ext(ctx, tx, withFailed)
			if err != nil {
				return nil, err
			}
			ok = append(ok, more...)
		}
	}
	requeued := map[string]bool{}
	for _, r := range ok {
		if r.Status == outbox.StatusFailed {
			requeued[r.Key] = true
		}
	}
	reviving := map[string]bool{}
	for _, r := range ok {
		run, aborted := runs[r.AgentRunID]
		switch {
		case !aborted || r.Status == outbox.StatusPending:
			p.changes = append(p.changes, q.change(r))
		case r.Status == outbox.StatusCancelled:
			p.refused = append(p.refused, refusal(r, "requeue", cancelledWhy(run)))
		default: // failed, in an aborted run
			if why := reviveWhy(run, requeued); why != "" {
				p.refused = append(p.refused, refusal(r, "requeue", why))
				continue
			}
			p.changes = append(p.changes, q.change(r))
			if !reviving[run.ID] {
				reviving[run.ID] = true
				p.revive = append(p.revive, Revival{AgentRunID: run.ID, AbortReason: run.Reason})
			}
		}
	}
	if dry {
		for i := range p.revive {
			keys, err := q.c.restorable(ctx, tx, p.revive[i].AgentRunID)
			if err != nil {
				return nil, err
			}
			p.revive[i].Restored = keys
		}
	}
	return p, nil
}

func (q requeuer) change(r candidate) Change {
	attempts := r.Attempts
	if r.Status == outbox.StatusFailed {
		attempts = 0 // a fresh budget, same key
	}
	ch := change(r, outbox.StatusPending, attempts)
	if r.NotBefore != nil {
		at := r.NotBefore.UTC().Format(time.RFC3339)
		if q.ignoreFloor {
			ch.Warning = "due now: overrides the provider's Retry-After (or backoff) that asked to wait until " + at
		} else {
			ch.NotBefore = r.NotBefore
			ch.Warning = "due at " + at + ", when the provider's Retry-After (or backoff) allows; --ignore-retry-after sends it now"
		}
	}
	return ch
}

func (q requeuer) apply(ctx context.Context, tx pgx.Tx, p *plan) error {
	if len(p.changes) == 0 {
		return nil
	}
	if err := q.abortedSincePlan(ctx, tx, p); err != nil {
		return err
	}
	keys, from := make([]string, len(p.changes)), make([]outbox.Status, len(p.changes))
	for i, ch := range p.changes {
		keys[i], from[i] = ch.Key, ch.FromStatus
	}
	// A requeued row stays behind its not_before floor unless the operator
	// asked to ignore it.
	done, err := q.c.st.Requeue(ctx, tx, keys, from, q.ignoreFloor)
	if err != nil {
		return fmt.Errorf("requeue: %w", err)
	}
	if err := q.c.settleRaces(ctx, tx, p, done, "requeue"); err != nil {
		return err
	}
	// A pending row that stays pending with its attempts changes no status:
	// record the action on its chain explicitly.
	var quiet []string
	for _, ch := range p.changes {
		if ch.FromStatus == ch.Status && ch.FromAttempts == ch.Attempts {
			quiet = append(quiet, ch.Key)
		}
	}
	if len(quiet) > 0 {
		if err := q.c.st.AuditAppendEach(ctx, tx, quiet, "operator:requeue", nullIfEmpty(q.who.Reason)); err != nil {
			return fmt.Errorf("requeue: audit: %w", err)
		}
	}
	for i := range p.revive {
		if err := q.c.revive(ctx, tx, &p.revive[i], q.who); err != nil {
			return err
		}
	}
	return q.c.st.Notify(ctx, tx)
}

// abortedSincePlan moves to the refusals the planned changes of failed or
// cancelled rows whose run was not aborted when the plan read it and is now,
// its runs row locked: another operator revived the run meanwhile, and its
// rows failed again, aborting it anew. Requeued without the revival this
// plan did not make, they would be cancelled at their claim, never sent,
// and counted requeued.
func (q requeuer) abortedSincePlan(ctx context.Context, tx pgx.Tx, p *plan) error {
	reviving := map[string]bool{}
	for _, rv := range p.revive {
		reviving[rv.AgentRunID] = true
	}
	var ids []string
	for _, ch := range p.changes {
		if ch.FromStatus != outbox.StatusPending && !reviving[ch.AgentRunID] && !slices.Contains(ids, ch.AgentRunID) {
			ids = append(ids, ch.AgentRunID)
		}
	}
	runs, err := q.c.abortedRuns(ctx, tx, ids, true)
	if err != nil || len(runs) == 0 {
		return err
	}
	kept := p.changes[:0]
	for _, ch := range p.changes {
		run, aborted := runs[ch.AgentRunID]
		if !aborted || ch.FromStatus == outbox.StatusPending || reviving[ch.AgentRunID] {
			kept = append(kept, ch)
			continue
		}
		p.refused = append(p.refused, &TransitionError{Key: ch.Key, Status: ch.FromStatus, Action: "requeue",
			Why: fmt.Sprintf("its run %s was aborted again while this requeue ran (%s by %s): run the requeue again, which revives it if it may be", run.ID, run.Reason, run.By)})
	}
	p.changes = kept
	return nil
}

// settleRaces moves the planned changes whose conditional update matched no
// row (done lists the keys that did change) to the refusals, with the
// row's new status.
func (c *Client) settleRaces(ctx context.Context, tx pgx.Tx, p *plan, done []string, verb string) error {
	if len(done) == len(p.changes) {
		return nil
	}
	ok := make(map[string]bool, len(done))
	for _, k := range done {
		ok[k] = true
	}
	kept := p.changes[:0]
	for _, ch := range p.changes {
		if ok[ch.Key] {
			kept = append(kept, ch)
			continue
		}
		now, err := c.st.RowStatus(ctx, tx, ch.Key)
		if err != nil {
			return fmt.Errorf("%s %s: %w", verb, ch.Key, err)
		}
		p.refused = append(p.refused, raced(ch.Key, verb, now))
	}
	p.changes = kept
	return nil
}

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
