package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5"
)

// Inspection is everything known about one key. Its JSON object carries the
// row's columns at the top level (key and status also for a pruned key),
// then pruned_at, saga, run_rows and audit.
type Inspection struct {
	Key    string        `json:"key"`
	Status outbox.Status `json:"status"`
	*Row                 // nil when the row was pruned
	// PrunedAt is set when only the tombstone of the key is left; Status is
	// then its final status.
	PrunedAt *time.Time `json:"pruned_at,omitempty"`
	// Saga is the saga of the row's run, when the run is aborted.
	Saga *Saga `json:"saga"`
	// RunRows are the rows of the row's run in seq order (at most
	// MaxRunRows).
	RunRows []RunRow `json:"run_rows"`
	// Audit is the key's audit trail, oldest first.
	Audit []AuditEntry `json:"audit"`
	// AuditProblems is what `drainer audit verify` finds wrong with the
	// key's trail (store.VerifyAuditKey: an entry edited, removed or
	// inserted, a change made with the audit bypassed, what a rotation
	// found and kept in its anchor), first first; empty when it holds.
	AuditProblems []BrokenLink `json:"audit_problems"`
}

// MaxRunRows bounds Inspection.RunRows.
const MaxRunRows = 1000

// Saga is a row of the sagas view: an aborted run and its compensation.
type Saga = store.Saga

// RunRow is a short view of one row of a run.
type RunRow = store.RunRow

// AuditEntry is one entry of the audit trail (hashes left out).
type AuditEntry = store.AuditEntry

// Inspect returns the row of key with its run, saga and audit trail. A
// pruned key answers its final status from the tombstones; an unknown key
// is a *NotFoundError.
func (c *Client) Inspect(ctx context.Context, key string) (*Inspection, error) {
	in, _, err := c.InspectPreview(ctx, key, 0)
	return in, err
}

// InspectPreview is Inspect reading the row's payload and response only up
// to limit bytes each (store.ReadRowPreview; 0: whole): a larger one is nil
// in the row, its size and first characters in the preview.
func (c *Client) InspectPreview(ctx context.Context, key string, limit int) (*Inspection, store.RowPreview, error) {
	var in *Inspection
	var p store.RowPreview
	err := c.readOnly(ctx, func(tx pgx.Tx) error {
		var err error
		if in, p, err = c.inspect(ctx, tx, key, limit); err != nil {
			return err
		}
		// In the same snapshot as the trail shown.
		if in.AuditProblems, err = c.st.VerifyAuditKey(ctx, tx, in.Key); err != nil {
			return fmt.Errorf("inspect %s: verify its audit trail: %w", key, err)
		}
		if in.AuditProblems == nil {
			in.AuditProblems = []BrokenLink{}
		}
		return nil
	})
	if err != nil {
		return nil, p, err
	}
	return in, p, nil
}

func (c *Client) inspect(ctx context.Context, tx pgx.Tx, key string, limit int) (*Inspection, store.RowPreview, error) {
	var p store.RowPreview
	var row *Row
	var err error
	if limit > 0 {
		row, p, err = c.st.ReadRowPreview(ctx, tx, key, limit)
	} else {
		row, err = c.st.ReadRow(ctx, tx, key)
	}
	row, err = found(key)(row, err)
	in, err := c.inspectRow(ctx, tx, key, row, err)
	return in, p, err
}

func (c *Client) inspectRow(ctx context.Context, tx pgx.Tx, key string, row *Row, err error) (*Inspection, error) {
	var nf *NotFoundError
	switch {
	case errors.As(err, &nf):
		return c.inspectPruned(ctx, tx, key, err)
	case err != nil:
		return nil, err
	}
	in := &Inspection{Key: row.Key, Status: row.Status, Row: row}
	if in.Saga, err = c.st.ReadSaga(ctx, tx, row.AgentRunID); err != nil {
		return nil, fmt.Errorf("inspect %s: saga: %w", key, err)
	}
	if in.RunRows, err = c.st.RunRows(ctx, tx, row.AgentRunID, MaxRunRows); err != nil {
		return nil, fmt.Errorf("inspect %s: run rows: %w", key, err)
	}
	if in.Audit, err = c.auditOf(ctx, tx, key); err != nil {
		return nil, err
	}
	return in, nil
}

func (c *Client) inspectPruned(ctx context.Context, tx pgx.Tx, key string, notFound error) (*Inspection, error) {
	ts, err := c.st.ReadTombstone(ctx, tx, key)
	if err != nil {
		return nil, fmt.Errorf("inspect %s: tombstone: %w", key, err)
	}
	if ts == nil {
		return c.inspectChain(ctx, tx, key, notFound)
	}
	in := &Inspection{Key: key, Status: ts.FinalStatus, PrunedAt: &ts.PrunedAt, RunRows: []RunRow{}}
	if in.Audit, err = c.auditOf(ctx, tx, key); err != nil {
		return nil, err
	}
	return in, nil
}

// OperatorChains are the prefixes of the audit chains that record what was
// done to something other than a row: pauses and resumes of a route or an
// adapter, aborts and revivals of a run.
var OperatorChains = []string{"route:", "adapter:", "run:"}

// inspectChain answers the audit of a key without a row or a tombstone:
// no row, no status, its entries oldest first. That is an operator chain
// (route:X, adapter:A, run:R), or the chain of a row deleted outside
// retention, which audit verify reports (its entries, or once they are
// rotated away, the problem alone). Any other key is notFound; an operator
// chain nobody wrote says so.
func (c *Client) inspectChain(ctx context.Context, tx pgx.Tx, key string, notFound error) (*Inspection, error) {
	audit, err := c.auditOf(ctx, tx, key)
	if err != nil {
		return nil, err
	}
	if len(audit) > 0 {
		return &Inspection{Key: key, RunRows: []RunRow{}, Audit: audit}, nil
	}
	if slices.ContainsFunc(OperatorChains, func(p string) bool { return strings.HasPrefix(key, p) }) {
		return nil, &NotFoundError{What: "audit entry of " + key + " (nothing was paused, resumed, aborted or revived there)"}
	}
	problems, err := c.st.VerifyAuditKey(ctx, tx, key)
	if err != nil {
		return nil, fmt.Errorf("inspect %s: verify its audit trail: %w", key, err)
	}
	if len(problems) == 0 {
		return nil, notFound
	}
	return &Inspection{Key: key, RunRows: []RunRow{}, Audit: []AuditEntry{}}, nil
}

func (c *Client) auditOf(ctx context.Context, db store.DB, key string) ([]AuditEntry, error) {
	es, err := c.st.AuditTrail(ctx, db, key)
	if err != nil {
		return nil, fmt.Errorf("inspect %s: audit: %w", key, err)
	}
	return es, nil
}

// row reads the row of key, or returns a *NotFoundError.
func (c *Client) row(ctx context.Context, db store.DB, key string) (*Row, error) {
	return found(key)(c.st.ReadRow(ctx, db, key))
}

// found turns a read of key's row into the row, or a *NotFoundError when
// there is none.
func found(key string) func(*Row, error) (*Row, error) {
	return func(row *Row, err error) (*Row, error) {
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", key, err)
		}
		if row == nil {
			return nil, &NotFoundError{What: "row with key " + key}
		}
		return row, nil
	}
}
