package fleet

import (
	"context"
	"slices"
	"time"

	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5/pgxpool"
)

// membership is the fleet's list of live replicas: one row per replica in
// <schema>.fleet_members of the coordination database, its expiry set from
// the database clock at every heartbeat. A replica is alive while its row
// has not expired; one that stops deletes its row, so the others take its
// databases at their next heartbeat. Its statements are in package store
// (store/fleet.go).
type membership struct {
	pool *pgxpool.Pool
	st   *store.Store
	id   string
	// ensured: the tables exist (ensure succeeded once); until then the
	// replica has never been a member, and has nothing to leave. Read and
	// written by Run's loop only.
	ensured bool
	// failing: the last membership statement failed (the replica keeps
	// its last known members, none before the first answer). Loop only.
	failing bool
}

func newMembership(pool *pgxpool.Pool, st *store.Store, id string) *membership {
	return &membership{pool: pool, st: st, id: id}
}

// ensure creates the schema and the tables (fleet_members and
// fleet_databases) if missing.
func (m *membership) ensure(ctx context.Context) error {
	if m.ensured {
		return nil
	}
	if err := m.st.EnsureFleetTables(ctx, m.pool); err != nil {
		return err
	}
	m.ensured = true
	return nil
}

// beat renews this replica's row until now() + ttl, forgets rows expired
// long ago, and returns the live members (this one included), sorted, and
// those whose row has expired (a member that left deleted its row).
func (m *membership) beat(ctx context.Context, ttl time.Duration) (members, expired []string, err error) {
	rows, err := m.st.FleetHeartbeat(ctx, m.pool, m.id, ttl)
	if err != nil {
		return nil, nil, err
	}
	for _, r := range rows {
		if r.Alive {
			members = append(members, r.ID)
		} else {
			expired = append(expired, r.ID)
		}
	}
	if !slices.Contains(members, m.id) {
		members = append(members, m.id)
		slices.Sort(members)
	}
	return members, expired, nil
}

// leave deletes this replica's row and marks the databases it publishes as
// stopping, in one transaction: the others take them once releaseAll says
// their pools have closed (or a lease later).
func (m *membership) leave(ctx context.Context) error {
	return m.st.FleetLeave(ctx, m.pool, m.id)
}

// releaseAll marks every database this replica published as released: its
// engines have stopped and their pools closed.
func (m *membership) releaseAll(ctx context.Context) error {
	return m.st.FleetReleaseAll(ctx, m.pool, m.id)
}
