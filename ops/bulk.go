package ops

import (
	"context"
	"fmt"
	"github.com/drainer-io/drainer/outbox"
	"math"
	"time"

	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5"
)

// Bulk defaults.
const (
	DefaultBatchSize = 1000 // rows per transaction
	DefaultShow      = 50   // rows and refusals listed in a Result
)

// BulkOptions tune requeue and cancel by filter.
type BulkOptions struct {
	// DryRun computes what would change and changes nothing.
	DryRun bool
	// Limit acts on at most this many matching rows (0: all). Requeue keeps
	// the failed rows of one aborted run together, so a revival may add a few.
	Limit int
	// Show lists at most this many changes and refusals in the Result
	// (0: DefaultShow; negative: none; math.MaxInt: all). Counts always
	// cover every row.
	Show int
	// BatchSize is the number of rows per transaction (0: DefaultBatchSize).
	BatchSize int
	// IgnoreRetryAfter (requeue only) clears each row's not_before floor,
	// the wait a provider asked for (Retry-After) or its backoff put there,
	// so the row is due now. Without it a requeued row is due at its floor
	// and the change says so.
	IgnoreRetryAfter bool
}

// Change is one row an action changed (or, in a dry run, would change).
type Change struct {
	Key          string        `json:"key"`
	Seq          int64         `json:"seq"`
	AgentRunID   string        `json:"agent_run_id"`
	StepID       string        `json:"step_id"`
	ToolName     string        `json:"tool_name"`
	Kind         outbox.Kind   `json:"kind"`
	FromStatus   outbox.Status `json:"from_status"`
	Status       outbox.Status `json:"status"`
	FromAttempts int           `json:"from_attempts"`
	Attempts     int           `json:"attempts"`
	// NotBefore is the row's floor when it lies in the future: the moment a
	// provider's Retry-After (or its backoff) allows the next attempt.
	NotBefore *time.Time `json:"not_before,omitempty"`
	Warning   string     `json:"warning,omitempty"`
}

// Revival is an aborted run brought back to life by requeueing the failed
// rows that aborted it.
type Revival struct {
	AgentRunID  string `json:"agent_run_id"`
	AbortReason string `json:"abort_reason"`
	// Restored are the never-attempted rows the abort had cancelled, now
	// pending again.
	Restored []string `json:"restored"`
}

// Result is the outcome of requeue or cancel.
type Result struct {
	Action string `json:"action"`
	DryRun bool   `json:"dry_run"`
	// Count is the number of rows changed (or that would change), the rows
	// restored by revivals not included.
	Count int      `json:"count"`
	Rows  []Change `json:"rows"`
	// RefusedCount is the number of matching rows left alone.
	RefusedCount int                `json:"refused_count"`
	Refused      []*TransitionError `json:"refused"`
	Revived      []Revival          `json:"revived_runs"`
	// Warnings counts the changes with a warning.
	Warnings int `json:"warnings"`
	// Batches is the number of transactions used.
	Batches int `json:"batches"`
}

func newResult(action string, dry bool) *Result {
	return &Result{Action: action, DryRun: dry, Rows: []Change{}, Refused: []*TransitionError{}, Revived: []Revival{}}
}

func (r *Result) add(p *plan, show int) {
	r.Count += len(p.changes)
	r.RefusedCount += len(p.refused)
	for _, ch := range p.changes {
		if ch.Warning != "" {
			r.Warnings++
		}
		if len(r.Rows) < show {
			r.Rows = append(r.Rows, ch)
		}
	}
	for _, e := range p.refused {
		if len(r.Refused) < show {
			r.Refused = append(r.Refused, e)
		}
	}
	for _, rv := range p.revive {
		r.Revived = append(r.Revived, rv)
	}
	r.Batches++
}

// candidate is a row read for an action.
type candidate = store.Candidate

func change(r candidate, to outbox.Status, attempts int) Change {
	return Change{Key: r.Key, Seq: r.Seq, AgentRunID: r.AgentRunID, StepID: r.StepID, ToolName: r.ToolName,
		Kind: r.Kind, FromStatus: r.Status, Status: to, FromAttempts: r.Attempts, Attempts: attempts}
}

func refusal(r candidate, action, why string) *TransitionError {
	return &TransitionError{Key: r.Key, Status: r.Status, Action: action, Why: why}
}

// leaseWhy explains why an in_flight row is left alone.
func leaseWhy(r candidate) string {
	if r.LeaseExpiresAt == nil {
		return "a worker holds its lease; the request may be under way"
	}
	if r.LeaseExpired {
		return "its lease expired at " + r.LeaseExpiresAt.UTC().Format(time.RFC3339) +
			" (its replica died or lost the database): a reclaimer takes it back within seconds, then run this again; its last request may have been sent"
	}
	return "a worker holds its lease until " + r.LeaseExpiresAt.UTC().Format(time.RFC3339) + "; the request may be under way"
}

// plan is what one batch of an action changes and refuses.
type plan struct {
	changes []Change
	refused []*TransitionError
	revive  []Revival
}

// extender fetches, for requeue, the rows of runs beyond the current batch
// that the batch must handle together with it.
type extender func(ctx context.Context, tx pgx.Tx, runs []string) ([]candidate, error)

// action is requeue or cancel, split into a read-only plan and its apply.
type action interface {
	verb() string
	// plan decides about cands; with dry false it may lock what apply needs.
	plan(ctx context.Context, tx pgx.Tx, cands []candidate, ext extender, dry bool) (*plan, error)
	// apply performs p with conditional updates, moving rows that changed
	// meanwhile from p.changes to p.refused.
	apply(ctx context.Context, tx pgx.Tx, p *plan) error
}

// runKey performs a on one row. A refusal is returned as a *TransitionError.
func (c *Client) runKey(ctx context.Context, a action, who Who, key string, dry bool) (*Result, error) {
	res := newResult(a.verb(), dry)
	err := c.actionTx(ctx, a.verb(), who, dry, func(tx pgx.Tx) error {
		cands, err := c.st.CandidateOf(ctx, tx, key)
		if err != nil {
			return fmt.Errorf("%s %s: %w", a.verb(), key, err)
		}
		if len(cands) == 0 {
			return c.missing(ctx, tx, a.verb(), key)
		}
		p, err := a.plan(ctx, tx, cands, nil, dry)
		if err != nil {
			return err
		}
		if !dry && len(p.refused) == 0 {
			if err := a.apply(ctx, tx, p); err != nil {
				return err
			}
		}
		if len(p.refused) > 0 {
			return p.refused[0]
		}
		res.add(p, math.MaxInt)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// missing explains a key with no row: pruned (its tombstone's final status)
// or unknown.
func (c *Client) missing(ctx context.Context, db store.DB, verb, key string) error {
	ts, err := c.st.ReadTombstone(ctx, db, key)
	switch {
	case err != nil:
		return fmt.Errorf("%s %s: %w", verb, key, err)
	case ts == nil:
		return &NotFoundError{What: "row with key " + key}
	}
	return &TransitionError{Key: key, Status: ts.FinalStatus, Action: verb, Why: "its row was pruned; only its tombstone is left"}
}

// runBulk performs a on every row matching f, in batches of one
// transaction each, in seq order.
func (c *Client) runBulk(ctx context.Context, a action, who Who, f Filter, o BulkOptions) (*Result, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if err := who.validate(); err != nil {
		return nil, err
	}
	batch := o.BatchSize
	if batch <= 0 {
		batch = DefaultBatchSize
	}
	show := o.Show
	switch {
	case show == 0:
		show = DefaultShow
	case show < 0:
		show = 0
	}
	res := newResult(a.verb(), o.DryRun)
	b := &bulk{a: a, f: f.match(), dry: o.DryRun, cursor: f.AfterSeq, seen: map[string]bool{}}
	matched := 0
	for o.Limit <= 0 || matched < o.Limit {
		n := batch
		if o.Limit > 0 {
			n = min(n, o.Limit-matched)
		}
		var p *plan
		var got int
		err := c.actionTx(ctx, a.verb(), who, o.DryRun, func(tx pgx.Tx) error {
			var err error
			p, got, err = c.batch(ctx, tx, b, n)
			return err
		})
		if err != nil {
			return res, err
		}
		if p == nil {
			break
		}
		matched += got
		for _, ch := range p.changes {
			if ch.Seq > b.cursor {
				b.seen[ch.Key] = true
			}
		}
		for _, e := range p.refused {
			b.seen[e.Key] = true // a row refused ahead of its batch must not be counted twice
		}
		res.add(p, show)
	}
	return res, nil
}

// bulk is the state of one runBulk across its batches.
type bulk struct {
	a   action
	f   store.Filter
	dry bool
	// cursor is the seq of the last row of the last batch.
	cursor int64
	// seen holds the rows handled ahead of their batch.
	seen map[string]bool
}

// unseen drops the rows handled ahead of their batch.
func (b *bulk) unseen(cands []candidate) []candidate {
	out := cands[:0]
	for _, r := range cands {
		if !b.seen[r.Key] {
			out = append(out, r)
		}
	}
	return out
}

// batch plans (and, unless dry, applies) the next batch of up to n rows
// after b.cursor, which it advances. It returns the plan (nil when no row
// is left) and the number of rows matched.
func (c *Client) batch(ctx context.Context, tx pgx.Tx, b *bulk, n int) (*plan, int, error) {
	verb := b.a.verb()
	cands, err := c.st.Candidates(ctx, tx, b.f, b.cursor, n)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: select rows: %w", verb, err)
	}
	if len(cands) == 0 {
		return nil, 0, nil
	}
	last := cands[len(cands)-1].Seq
	fresh := b.unseen(cands)
	ext := func(ctx context.Context, tx pgx.Tx, runs []string) ([]candidate, error) {
		more, err := c.st.FailedCandidates(ctx, tx, b.f, last, runs)
		if err != nil {
			return nil, fmt.Errorf("%s: select rows of runs: %w", verb, err)
		}
		return b.unseen(more), nil
	}
	p, err := b.a.plan(ctx, tx, fresh, ext, b.dry)
	if err != nil {
		return nil, 0, err
	}
	if !b.dry {
		if err := b.a.apply(ctx, tx, p); err != nil {
			return nil, 0, err
		}
	}
	b.cursor = last
	return p, len(fresh), nil
}

// actionTx runs fn in an action's transaction, or, for a dry run, in a
// read-only one.
func (c *Client) actionTx(ctx context.Context, verb string, who Who, dry bool, fn func(pgx.Tx) error) error {
	if dry {
		if err := who.validate(); err != nil {
			return err
		}
		return c.readOnly(ctx, fn)
	}
	return c.begin(ctx, verb, who, fn)
}
