package ops

import "github.com/drainer-io/drainer/store"

// Row is one outbox row. JSON field names are the column names
// (docs/reference.md §2), plus the extras first_attempt_at, last_problem, forward_key, note,
// leased_by and lease_expires_at.
type Row = store.Row

// Str returns *p, or "" for nil.
func Str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
