package fleet

import (
	"hash/fnv"
	"slices"
)

// Owner returns the member that drains the database named db: the one of
// highest weight(member, db) (rendezvous, or highest-random-weight,
// hashing). Every replica that sees the same members computes the same
// owner without talking to the others; a member that joins takes from each
// other member only the databases it now weighs highest for, and a member
// that leaves gives each of its databases to the next highest, so nothing
// else moves. Ties (in practice never) go to the smaller member id. No
// members: "".
func Owner(members []string, db string) string {
	var best string
	var bestW uint64
	for i, m := range members {
		w := weight(m, db)
		if i == 0 || w > bestW || (w == bestW && m < best) {
			best, bestW = m, w
		}
	}
	return best
}

// Assign maps each database to its owner among members.
func Assign(members, dbs []string) map[string]string {
	members = slices.Clone(members)
	slices.Sort(members)
	out := make(map[string]string, len(dbs))
	for _, db := range dbs {
		out[db] = Owner(members, db)
	}
	return out
}

// weight hashes member and db together: FNV-1a over both (a NUL between,
// so ("ab","c") and ("a","bc") differ), then the splitmix64 finaliser, whose
// avalanche FNV lacks on short, similar strings (tenant-001, tenant-002).
func weight(member, db string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(member))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(db))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
