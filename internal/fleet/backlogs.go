package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Backlog is one database's backlog as its owner last published it in
// <schema>.fleet_databases of the coordination database.
type Backlog struct {
	Name string `json:"name"`
	// Member is the replica that published it; MemberAlive says whether
	// its membership has not expired (a dead member's row is only stale).
	Member      string `json:"member"`
	MemberAlive bool   `json:"member_alive"`
	// State is the database's state at its owner: starting, running,
	// unreachable or schema_mismatch; stopping while the owner lets it go
	// and released once its pool has closed.
	State        string           `json:"state"`
	RowsByStatus map[string]int64 `json:"rows_by_status"`
	// OldestPendingAgeSeconds is from the same sample.
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
	// SampledAt is when the counts were measured (nil: never), on the
	// coordination database's clock, and SampleAgeSeconds how long ago.
	SampledAt        *time.Time `json:"sampled_at"`
	SampleAgeSeconds *float64   `json:"sample_age_seconds"`
	// PublishedAt is the owner's last heartbeat that wrote the row.
	PublishedAt time.Time `json:"published_at"`
}

// ErrNotJoined is Backlogs before the heartbeat has first read the
// backlogs from the coordination database (or once Run has returned).
var ErrNotJoined = errors.New("fleet: the databases' backlogs have not been read from the coordination database yet")

// The backlogs are the table <schema>.fleet_databases: each replica writes
// the rows of the databases it drains after each heartbeat, on its
// coordination connection, from the snapshot its engines already keep (no
// query in the drained databases), and reads every replica's rows back in
// the same round trip (store.PublishFleet): the whole fleet's backlog, kept
// in memory for the console.

// backlogsOf turns the rows read back into Backlogs.
func backlogsOf(rows []store.FleetBacklog) ([]Backlog, error) {
	out := make([]Backlog, 0, len(rows))
	for _, r := range rows {
		b := Backlog{Name: r.Name, Member: r.Member, MemberAlive: r.MemberAlive, State: r.State,
			RowsByStatus: map[string]int64{}, OldestPendingAgeSeconds: r.OldestPendingAgeSeconds,
			SampledAt: r.SampledAt, SampleAgeSeconds: r.SampleAgeSeconds, PublishedAt: r.PublishedAt.UTC()}
		if r.RowsByStatus != nil {
			if err := json.Unmarshal(r.RowsByStatus, &b.RowsByStatus); err != nil {
				return nil, fmt.Errorf("fleet databases: %w", err)
			}
		}
		if b.SampledAt != nil {
			at := b.SampledAt.UTC()
			b.SampledAt = &at
		}
		out = append(out, b)
	}
	return out, nil
}

// overview is the whole fleet's backlog as the heartbeat last read it.
type overview struct {
	mu   sync.Mutex
	rows []Backlog
	at   time.Time // when it was read (zero: not yet)
}

func (o *overview) store(rows []Backlog, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rows, o.at = rows, at
}

// Backlogs returns every database's last published backlog, sorted by
// name, as this replica's heartbeat last read it from the coordination
// database, and when it read it (readAt). It reads nothing itself: the
// heartbeat reads the table back in the round trip of its publication, so
// the console's overview costs no connection (none to the coordination
// database, none to a drained database) and never waits on one. Each
// SampleAgeSeconds counts until now; MemberAlive is as of readAt. It may
// include a database no longer listed until it is forgotten; Databases is
// the list. ErrNotJoined until the first read (and once Run has returned).
func (f *Fleet) Backlogs() (bl []Backlog, readAt time.Time, err error) {
	if !f.joined.Load() {
		return nil, time.Time{}, ErrNotJoined
	}
	f.overview.mu.Lock()
	rows, at := f.overview.rows, f.overview.at
	f.overview.mu.Unlock()
	if at.IsZero() {
		return nil, time.Time{}, ErrNotJoined
	}
	since := time.Since(at).Seconds()
	bl = make([]Backlog, len(rows))
	for i, b := range rows {
		b.RowsByStatus = maps.Clone(b.RowsByStatus)
		if b.SampledAt != nil {
			sampled := *b.SampledAt
			b.SampledAt = &sampled
		}
		if b.SampleAgeSeconds != nil {
			age := *b.SampleAgeSeconds + since
			b.SampleAgeSeconds = &age
		}
		bl[i] = b
	}
	return bl, at.Round(0).UTC(), nil
}

// publish writes the backlog of every database this replica drains and
// returns every database's, as published by each replica.
func (f *Fleet) publish(ctx context.Context, pool *pgxpool.Pool, lockWait time.Duration) ([]Backlog, error) {
	f.mu.Lock()
	var rows []store.FleetPublished
	for name, e := range f.entries {
		p := store.FleetPublished{Name: name, State: e.state.Load().(string)}
		if e.stopping {
			p.State = stateStopping
		}
		if eng := e.eng.Load(); eng != nil {
			if s, age, ok := eng.Backlog(); ok {
				raw, err := json.Marshal(s.RowsByStatus)
				if err == nil {
					js, oldest, ms := string(raw), s.OldestPendingAge, float64(age.Milliseconds())
					p.RowsByStatus, p.OldestPending, p.SampleAge = &js, &oldest, &ms
				}
			}
		}
		rows = append(rows, p)
	}
	var released []string
	for name := range f.released {
		if f.entries[name] == nil {
			released = append(released, name)
		}
	}
	var listed []string
	if f.listed {
		listed = make([]string, 0, len(f.dbs))
		for _, db := range f.dbs {
			listed = append(listed, db.Name)
		}
	}
	f.mu.Unlock()
	slices.SortFunc(rows, func(a, b store.FleetPublished) int { return strings.Compare(a.Name, b.Name) })
	read, err := f.store.PublishFleet(ctx, pool, store.FleetPublication{Member: f.cfg.MemberID, Rows: rows,
		Released: released, Listed: listed, Forget: 2 * max(f.cfg.Refresh, f.cfg.Heartbeat), LockWait: lockWait})
	var out []Backlog
	if err == nil {
		out, err = backlogsOf(read)
	}
	if err == nil {
		f.mu.Lock()
		for _, name := range released {
			delete(f.released, name)
		}
		f.mu.Unlock()
	}
	return out, err
}
