package ops

import (
	"context"
	"fmt"

	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5"
)

// BrokenLink is an audit entry that does not verify.
type BrokenLink = store.BrokenLink

// Verification is the result of VerifyAudit.
type Verification struct {
	OK      bool         `json:"ok"`
	Entries int64        `json:"entries"`
	Chains  int64        `json:"chains"`
	Broken  []BrokenLink `json:"broken"`
	// Checkpoints is the verification of signed checkpoints, when asked
	// for (VerifyCheckpoints); OK is false when it found a problem.
	Checkpoints *CheckpointVerification `json:"checkpoints,omitempty"`
}

// DefaultVerifyLimit bounds the broken links VerifyAudit reports.
const DefaultVerifyLimit = 100

// VerifyAudit checks every hash chain of the audit trail (audit_verify)
// and returns the first broken links, at most limit of them.
func (c *Client) VerifyAudit(ctx context.Context, limit int) (*Verification, error) {
	if limit <= 0 {
		limit = DefaultVerifyLimit
	}
	out := &Verification{}
	err := c.readOnly(ctx, func(tx pgx.Tx) error {
		var err error
		if out.Entries, out.Chains, err = c.st.CountAudit(ctx, tx); err != nil {
			return err
		}
		out.Broken, err = c.st.VerifyAudit(ctx, tx, limit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("verify audit: %w", err)
	}
	out.OK = len(out.Broken) == 0
	return out, nil
}
