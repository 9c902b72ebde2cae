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

// backlogs is the table <schema>.fleet_databases: each replica writes the
// rows of the databases it drains after each heartbeat, on its coordination
// connection, from the snapshot its engines already keep (no query in the
// drained databases), and reads every replica's rows back in the same round
// trip: the whole fleet's backlog, kept in memory for the console.
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

// publish writes rows as member's, marks the databases of released as
// released (where member still holds their row), and returns every
// published row (this replica's and the others'), sorted by name: one
// round trip, one implicit transaction. A row without a sample keeps the
// last one (a new owner shows the previous owner's counts, with their age,
// until its engine measures). A stopping row never takes the row of
// another member (the new owner's). When listed is not nil, rows of databases no longer listed are
// deleted once no one has written them for forget: a replica whose list is
// older than another's never deletes a database just added. A lock held on
// the table (by a migration, an operator) cuts it on the server after
// lockWait, leaving the connection usable; the statements are sent in one
// pipeline (the connection's QueryExecModeExec: no prepare round trip, which
// would wait on such a lock before lock_timeout is set).
func (b backlogs) publish(ctx context.Context, pool *pgxpool.Pool, member string, rows []published, released, listed []string,
	forget, lockWait time.Duration) ([]Backlog, error) {
	names := make([]string, len(rows))
	states := make([]string, len(rows))
	counts := make([]*string, len(rows))
	oldest := make([]*float64, len(rows))
	ages := make([]*float64, len(rows))
	for i, r := range rows {
		names[i], states[i], counts[i], oldest[i], ages[i] = r.name, r.state, r.rows, r.oldest, r.age
	}
	batch := &pgx.Batch{}
	// Local to the batch's implicit transaction: the heartbeat's statements
	// keep waiting as they always did.
	batch.Queue(`SELECT set_config('lock_timeout', $1, true)`, fmt.Sprintf("%dms", max(lockWait.Milliseconds(), 1)))
	batch.Queue(`WITH gone AS (
	DELETE FROM `+b.table+` WHERE $7::text[] IS NOT NULL AND NOT (name = ANY($7::text[]))
	   AND published_at < now() - $8::float8 * interval '1 millisecond'
)
INSERT INTO `+b.table+` AS d (name, member_id, state, rows_by_status, oldest_pending_age_seconds, sampled_at, published_at)
SELECT u.n, $1::text, u.s, u.r::jsonb, u.o, now() - u.a * interval '1 millisecond', now()
  FROM unnest($2::text[], $3::text[], $4::text[], $5::float8[], $6::float8[]) AS u(n, s, r, o, a)
ON CONFLICT (name) DO UPDATE SET
	member_id = excluded.member_id, state = excluded.state, published_at = excluded.published_at,
	rows_by_status = coalesce(excluded.rows_by_status, d.rows_by_status),
	oldest_pending_age_seconds = coalesce(excluded.oldest_pending_age_seconds, d.oldest_pending_age_seconds),
	sampled_at = coalesce(excluded.sampled_at, d.sampled_at)
 WHERE excluded.state <> $9 OR d.member_id = excluded.member_id`,
		member, names, states, counts, oldest, ages, listed, float64(forget.Milliseconds()), stateStopping)
	batch.Queue(`UPDATE `+b.table+` SET state = $3, published_at = now() WHERE member_id = $1 AND name = ANY($2::text[])`,
		member, released, stateReleased)
	batch.Queue(`SELECT d.name, d.member_id, d.state, d.rows_by_status, coalesce(d.oldest_pending_age_seconds, 0),
       d.sampled_at, extract(epoch FROM now() - d.sampled_at)::float8, d.published_at,
       EXISTS (SELECT 1 FROM ` + b.members + ` m WHERE m.member_id = d.member_id AND m.expires_at > now())
  FROM ` + b.table + ` d ORDER BY d.name`)
	br := pool.SendBatch(ctx, batch)
	defer br.Close()
	for range 3 {
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("fleet databases: %w", err)
		}
	}
	out, err := scanBacklogs(br.Query())
	if err != nil {
		return nil, err
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("fleet databases: %w", err)
	}
	return out, nil
}

// scanBacklogs reads the rows of publish's last statement.
func scanBacklogs(rows pgx.Rows, err error) ([]Backlog, error) {
	if err != nil {
		return nil, fmt.Errorf("fleet databases: %w", err)
	}
	out := []Backlog{}
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
	var rows []published
	for name, e := range f.entries {
		p := published{name: name, state: e.state.Load().(string)}
		if e.stopping {
			p.state = stateStopping
		}
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
	slices.SortFunc(rows, func(a, b published) int { return strings.Compare(a.name, b.name) })
	forget := 2 * max(f.cfg.Refresh, f.cfg.Heartbeat)
	out, err := newBacklogs(f.cfg.Schema).publish(ctx, pool, f.cfg.MemberID, rows, released, listed, forget, lockWait)
	if err == nil {
		f.mu.Lock()
		for _, name := range released {
			delete(f.released, name)
		}
		f.mu.Unlock()
	}
	return out, err
}
