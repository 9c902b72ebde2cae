package fleet

import (
	"context"
	"fmt"
	"github.com/drainer-io/drainer/tooling/testkit"
	"sync"
	"testing"
	"time"
)

// TestFleetPublishesBacklogs: each replica publishes the backlog of the
// databases it drains in fleet_databases; anyone reads the whole fleet's
// there (each at its heartbeat, in the round trip of its publication). A
// database removed from the list is forgotten; one whose owner
// dies is published by its new owner.
func TestFleetPublishesBacklogs(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, 100)
	dbs := names("con_pub", 3)
	cl.createDBs(t, dbs)
	var mu sync.Mutex
	listed := dbs
	src := func(ctx context.Context) ([]Database, error) {
		mu.Lock()
		defer mu.Unlock()
		return static(cl, listed)(ctx)
	}
	rt := routing(t, newCounter())
	a := startReplica(t, cl.url(dbs[0]), src, rt, "a", nil)
	b := startReplica(t, cl.url(dbs[0]), src, rt, "b", nil)
	want := map[string]int64{}
	for i, db := range dbs {
		want[db] = int64(5 * (i + 1))
		cl.enqueue(t, db, "1", 5*(i+1))
	}
	// published says whether r reads, for each database, its true count of
	// succeeded rows published by its owner among live members.
	published := func(r *replica, owner func(string) string) (bool, string) {
		bl, _, err := r.Backlogs()
		if err != nil {
			return false, err.Error()
		}
		got := fmt.Sprint(bl)
		if len(bl) != len(want) {
			return false, got
		}
		for _, x := range bl {
			if w, ok := want[x.Name]; !ok || x.RowsByStatus["succeeded"] != w || x.RowsByStatus["pending"] != 0 ||
				x.State != "running" || x.Member != owner(x.Name) || !x.MemberAlive || x.SampledAt == nil {
				return false, got
			}
		}
		return true, got
	}
	owner2 := func(db string) string { return Owner([]string{"a", "b"}, db) }
	testkit.WaitFor(t, 3*time.Minute, "every database's backlog published by its owner", func() (bool, string) {
		if !settled(dbs, a, b) {
			return false, state(newCounter(), a, b)
		}
		return published(b, owner2)
	})
	// Each replica reads the table back at its own heartbeat: a, at its
	// next one at the latest.
	testkit.WaitFor(t, 90*time.Second, "replica a reading every database's backlog", func() (bool, string) { return published(a, owner2) })

	// A database no longer listed is forgotten.
	mu.Lock()
	listed = dbs[:2]
	mu.Unlock()
	delete(want, dbs[2])
	testkit.WaitFor(t, 3*time.Minute, "the unlisted database forgotten", func() (bool, string) { return published(a, owner2) })

	// The owner of dbs[0] dies: its row stays, then the survivor publishes it.
	dead, survivor := a, b
	if owner2(dbs[0]) == "b" {
		dead, survivor = b, a
	}
	dead.Abandon()
	dead.stop(t)
	testkit.WaitFor(t, 3*time.Minute, "the survivor publishing every database", func() (bool, string) {
		return published(survivor, func(string) string { return survivor.ID() })
	})
}
