package store

import (
	"context"
	"time"
)

// Reschedule makes the row of keys[i] due in[i] from now (database clock),
// at its not_before floor at the earliest.
func (s *Store) Reschedule(ctx context.Context, db DB, keys []string, in []time.Duration) error {
	ms := make([]int64, len(in))
	for i, d := range in {
		ms[i] = d.Milliseconds()
	}
	_, err := db.Exec(ctx, s.sql(`UPDATE {s}.queue o SET next_attempt_at = now() + d.ms * interval '1 millisecond'
	      FROM unnest($1::text[], $2::bigint[]) AS d(key, ms), {s}.intents i WHERE i.key = d.key AND o.seq = i.seq`), keys, ms)
	return err
}
