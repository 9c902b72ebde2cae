package store_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
)

// TestFleetTables: replicas starting together create the fleet's tables
// once; a heartbeat renews its row, reports expired ones and forgets rows
// expired long ago; a publication keeps the last sample of a row without
// one, never lets a stopping row take another member's, marks released
// rows and forgets unlisted ones; leaving marks the member's rows stopping,
// and releasing them released.
func TestFleetTables(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	st := store.MustNew("fleet_coord")
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() { errs <- st.EnsureFleetTables(ctx, pool) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("EnsureFleetTables: %v", err)
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO fleet_coord.fleet_members (member_id, expires_at) VALUES ('old', now() - interval '2 hours')`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.FleetHeartbeat(ctx, pool, "b", -time.Second); err != nil {
		t.Fatal(err)
	}
	members, err := st.FleetHeartbeat(ctx, pool, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if want := []store.FleetMember{{ID: "a", Alive: true}, {ID: "b"}}; !slices.Equal(members, want) {
		t.Fatalf("members %v, want %v (old forgotten)", members, want)
	}

	counts := `{"pending": 3}`
	oldest, age := 1.5, 2000.0
	got := publish(t, st, pool, store.FleetPublication{Member: "a", Rows: []store.FleetPublished{
		{Name: "db1", State: "running", RowsByStatus: &counts, OldestPending: &oldest, SampleAge: &age},
		{Name: "db2", State: "starting"},
	}})
	if len(got) != 2 || got[0].Name != "db1" || got[1].Name != "db2" {
		t.Fatalf("read back %+v, want db1 and db2", got)
	}
	d1, d2 := got[0], got[1]
	if d1.Member != "a" || !d1.MemberAlive || d1.State != "running" || string(d1.RowsByStatus) != counts ||
		d1.OldestPendingAgeSeconds != 1.5 || d1.SampledAt == nil || d1.SampleAgeSeconds == nil || *d1.SampleAgeSeconds < 2 {
		t.Errorf("db1 read back as %+v", d1)
	}
	if d2.RowsByStatus != nil || d2.SampledAt != nil || d2.SampleAgeSeconds != nil || d2.OldestPendingAgeSeconds != 0 {
		t.Errorf("db2, never sampled, read back as %+v", d2)
	}

	// b, expired, lets db1 go: its stopping row does not take a's.
	got = publish(t, st, pool, store.FleetPublication{Member: "b", Rows: []store.FleetPublished{{Name: "db1", State: store.FleetStopping}}})
	if got[0].Member != "a" || got[0].State != "running" {
		t.Errorf("db1 after b's stopping row: %+v, want a's running row", got[0])
	}
	// a publishes db1 without a sample and releases db2; only db1 is listed.
	got = publish(t, st, pool, store.FleetPublication{Member: "a", Rows: []store.FleetPublished{{Name: "db1", State: "running"}},
		Released: []string{"db2"}, Listed: []string{"db1", "db2"}})
	if len(got) != 2 || string(got[0].RowsByStatus) != counts || got[1].State != store.FleetReleased {
		t.Errorf("after a sample-less row and a release: %+v", got)
	}
	got = publish(t, st, pool, store.FleetPublication{Member: "a", Rows: []store.FleetPublished{{Name: "db1", State: "running"}},
		Listed: []string{"db1"}})
	if len(got) != 1 || got[0].Name != "db1" {
		t.Errorf("db2 unlisted and not written since: %+v, want db1 alone", got)
	}

	if err := st.FleetLeave(ctx, pool, "a"); err != nil {
		t.Fatal(err)
	}
	if got = publish(t, st, pool, store.FleetPublication{Member: "c"}); got[0].State != store.FleetStopping || got[0].MemberAlive {
		t.Errorf("after a left: %+v, want db1 stopping, its member gone", got[0])
	}
	if err := st.FleetReleaseAll(ctx, pool, "a"); err != nil {
		t.Fatal(err)
	}
	if got = publish(t, st, pool, store.FleetPublication{Member: "c"}); got[0].State != store.FleetReleased {
		t.Errorf("after a released all: %+v, want db1 released", got[0])
	}
}

func publish(t *testing.T, st *store.Store, db store.DB, p store.FleetPublication) []store.FleetBacklog {
	t.Helper()
	p.LockWait = 5 * time.Second
	got, err := st.PublishFleet(context.Background(), db, p)
	if err != nil {
		t.Fatalf("PublishFleet(%+v): %v", p, err)
	}
	return got
}
