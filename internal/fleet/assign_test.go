package fleet

import (
	"fmt"
	"testing"
)

func dbNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("tenant-%04d", i)
	}
	return out
}

// TestAssignSpread: over many databases every member gets its share within
// 5 per cent (3.7 standard deviations at ten members), for several fleet sizes and member names.
func TestAssignSpread(t *testing.T) {
	t.Parallel()
	dbs := dbNames(50000)
	for _, tc := range []struct {
		name    string
		members []string
	}{
		{"two", []string{"a", "b"}},
		{"three hosts", []string{"drainer-0:1:5f3a", "drainer-1:1:77c1", "drainer-2:1:0b9e"}},
		{"five", []string{"m1", "m2", "m3", "m4", "m5"}},
		{"ten", []string{"r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			count := map[string]int{}
			for _, o := range Assign(tc.members, dbs) {
				count[o]++
			}
			fair := float64(len(dbs)) / float64(len(tc.members))
			for _, m := range tc.members {
				if dev := (float64(count[m]) - fair) / fair; dev > 0.05 || dev < -0.05 {
					t.Errorf("member %s owns %d databases, fair share %.0f (%.1f%% off)", m, count[m], fair, 100*dev)
				}
			}
		})
	}
}

// TestAssignMinimalMovement: a member joining takes only databases it now
// owns (about 1/(n+1) of them) and moves nothing between the others; a
// member leaving moves only its own databases.
func TestAssignMinimalMovement(t *testing.T) {
	t.Parallel()
	dbs := dbNames(3000)
	before := Assign([]string{"a", "b", "c"}, dbs)
	joined := Assign([]string{"a", "b", "c", "d"}, dbs)
	moved := 0
	for _, db := range dbs {
		if before[db] != joined[db] {
			moved++
			if joined[db] != "d" {
				t.Fatalf("%s moved from %s to %s when d joined", db, before[db], joined[db])
			}
		}
	}
	if f := float64(moved) / float64(len(dbs)); f < 0.2 || f > 0.3 {
		t.Errorf("d took %.1f%% of the databases, want about 25%%", 100*f)
	}
	left := Assign([]string{"a", "c"}, dbs)
	for _, db := range dbs {
		if before[db] != "b" && before[db] != left[db] {
			t.Fatalf("%s moved from %s to %s when b left", db, before[db], left[db])
		}
		if before[db] == "b" && left[db] == "b" {
			t.Fatalf("%s still owned by b after b left", db)
		}
	}
}

// TestOwnerStable: the owner depends on the set of members, not their order,
// and no members owns nothing.
func TestOwnerStable(t *testing.T) {
	t.Parallel()
	if o := Owner(nil, "x"); o != "" {
		t.Fatalf("owner with no members = %q", o)
	}
	for _, db := range dbNames(200) {
		if a, b := Owner([]string{"a", "b", "c"}, db), Owner([]string{"c", "a", "b"}, db); a != b {
			t.Fatalf("%s: owner %s or %s depending on order", db, a, b)
		}
	}
	if weight("ab", "c") == weight("a", "bc") {
		t.Fatal("weight does not separate member from database")
	}
}
