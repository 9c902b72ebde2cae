package store

import "hash/fnv"

// Advisory locks of the daemon's maintenance work, one per schema: only one
// replica at a time computes the snapshot or prunes. (The saga lock of a
// run is taken in SQL, by saga_lock_key, so that advance_saga and the
// operator commands share one definition.)
const (
	lockSnapshot  = "snapshot"
	lockRetention = "retention"
)

// lockKey maps a lock's name in this schema to an advisory lock key.
func (s *Store) lockKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte("drainer." + name + "." + s.schema))
	return int64(h.Sum64())
}
