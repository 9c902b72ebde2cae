package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
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
	// unreachable or schema_mismatch.
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

// ErrNotJoined is Backlogs before the fleet has joined the membership (or
// after it has left).
var ErrNotJoined = errors.New("fleet: not connected to the coordination database yet")

// backlogs is the table <schema>.fleet_databases: each replica writes the
// rows of the databases it drains after each heartbeat, on its coordination
// connection, from the snapshot its engines already keep (no query in the
// drained databases). Anyone reads the whole fleet's backlog from one place.
type backlogs struct {
	table   string // quoted schema.fleet_databases
	members string // quoted schema.fleet_members
}

func newBacklogs(schema string) backlogs {
	return backlogs{table: pgx.Identifier{schema, "fleet_databases"}.Sanitize(),
		members: pgx.Identifier{schema, "fleet_members"}.Sanitize()}
}

// createSQL creates the table; membership.ensure runs it under its lock.
func (b backlogs) createSQL() string {
	return `CREATE TABLE IF NOT EXISTS ` + b.table + ` (
	name                       text PRIMARY KEY,
	member_id                  text NOT NULL,
	state                      text NOT NULL,
	rows_by_status             jsonb,
	oldest_pending_age_seconds float8,
	sampled_at                 timestamptz,
	published_at               timestamptz NOT NULL DEFAULT now()
)`
}

// published is one row to write.
type published struct {
	name, state string
	rows        *string  // JSON; nil before the engine's first snapshot
	oldest      *float64 // seconds
	age         *float64 // the sample's age in milliseconds
}

// publish writes rows as member's in one statement. A row without a sample
// keeps the last one (a new owner shows the previous owner's counts, with
// their age, until its engine measures). When listed is not nil, rows of
// databases no longer listed are deleted once no one has written them for
// forget: a replica whose list is older than another's never deletes a
// database just added.
func (b backlogs) publish(ctx context.Context, pool *pgxpool.Pool, member string, rows []published, listed []string, forget time.Duration) error {
	names := make([]string, len(rows))
	states := make([]string, len(rows))
	counts := make([]*string, len(rows))
	oldest := make([]*float64, len(rows))
	ages := make([]*float64, len(rows))
	for i, r := range rows {
		names[i], states[i], counts[i], oldest[i], ages[i] = r.name, r.state, r.rows, r.oldest, r.age
	}
	_, err := pool.Exec(ctx, `WITH gone AS (
	DELETE FROM `+b.table+` WHERE $7::text[] IS NOT NULL AND NOT (name = ANY($7::text[]))
	   AND published_at < now() - $8 * interval '1 millisecond'
)
INSERT INTO `+b.table+` AS d (name, member_id, state, rows_by_status, oldest_pending_age_seconds, sampled_at, published_at)
SELECT u.n, $1, u.s, u.r::jsonb, u.o, now() - u.a * interval '1 millisecond', now()
  FROM unnest($2::text[], $3::text[], $4::text[], $5::float8[], $6::float8[]) AS u(n, s, r, o, a)
ON CONFLICT (name) DO UPDATE SET
	member_id = excluded.member_id, state = excluded.state, published_at = excluded.published_at,
	rows_by_status = coalesce(excluded.rows_by_status, d.rows_by_status),
	oldest_pending_age_seconds = coalesce(excluded.oldest_pending_age_seconds, d.oldest_pending_age_seconds),
	sampled_at = coalesce(excluded.sampled_at, d.sampled_at)`,
		member, names, states, counts, oldest, ages, listed, forget.Milliseconds())
	if err != nil {
		return fmt.Errorf("fleet databases: %w", err)
	}
	return nil
}

// read returns every published row, sorted by name.
func (b backlogs) read(ctx context.Context, pool *pgxpool.Pool) ([]Backlog, error) {
	rows, err := pool.Query(ctx, `SELECT d.name, d.member_id, d.state, d.rows_by_status, coalesce(d.oldest_pending_age_seconds, 0),
       d.sampled_at, extract(epoch FROM now() - d.sampled_at)::float8, d.published_at,
       EXISTS (SELECT 1 FROM `+b.members+` m WHERE m.member_id = d.member_id AND m.expires_at > now())
  FROM `+b.table+` d ORDER BY d.name`)
	if err != nil {
		return nil, fmt.Errorf("fleet databases: %w", err)
	}
	var out []Backlog
	var raw []byte
	var x Backlog
	_, err = pgx.ForEachRow(rows, []any{&x.Name, &x.Member, &x.State, &raw, &x.OldestPendingAgeSeconds, &x.SampledAt,
		&x.SampleAgeSeconds, &x.PublishedAt, &x.MemberAlive}, func() error {
		y := x
		y.RowsByStatus = map[string]int64{}
		if raw != nil {
			if err := json.Unmarshal(raw, &y.RowsByStatus); err != nil {
				return err
			}
		}
		if y.SampledAt != nil {
			at := y.SampledAt.UTC()
			y.SampledAt = &at
		}
		y.PublishedAt = y.PublishedAt.UTC()
		out = append(out, y)
		x = Backlog{}
		raw = nil
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("fleet databases: %w", err)
	}
	return out, nil
}

// Backlogs reads every database's last published backlog from the
// coordination database (no connection to any drained database), sorted by
// name, on a connection of its own opened on first use and closed after
// PoolIdle unused: never the heartbeat's, so a slow read cannot delay a
// beat. It may include a database no longer listed until it is forgotten;
// Databases is the list. ErrNotJoined until Run has joined the membership.
func (f *Fleet) Backlogs(ctx context.Context) ([]Backlog, error) {
	if !f.joined.Load() {
		return nil, ErrNotJoined
	}
	pool, err := f.pools.coordination(f.cfg.CoordinationURL)
	if err != nil {
		return nil, err
	}
	return newBacklogs(f.cfg.Schema).read(ctx, pool)
}

// publish writes the backlog of every database this replica drains.
func (f *Fleet) publish(ctx context.Context, pool *pgxpool.Pool) error {
	f.mu.Lock()
	var rows []published
	for name, e := range f.entries {
		if e.stopping {
			continue
		}
		p := published{name: name, state: e.state.Load().(string)}
		if eng := e.eng.Load(); eng != nil {
			if s, age, ok := eng.Backlog(); ok {
				raw, err := json.Marshal(s.RowsByStatus)
				if err == nil {
					js, oldest, ms := string(raw), s.OldestPendingAge, float64(age.Milliseconds())
					p.rows, p.oldest, p.age = &js, &oldest, &ms
				}
			}
		}
		rows = append(rows, p)
	}
	var listed []string
	if f.listed {
		listed = make([]string, 0, len(f.dbs))
		for _, db := range f.dbs {
			listed = append(listed, db.Name)
		}
	}
	f.mu.Unlock()
	slices.SortFunc(rows, func(a, b published) int { return strings.Compare(a.name, b.name) })
	forget := 2 * max(f.cfg.Refresh, f.cfg.Heartbeat)
	return newBacklogs(f.cfg.Schema).publish(ctx, pool, f.cfg.MemberID, rows, listed, forget)
}
