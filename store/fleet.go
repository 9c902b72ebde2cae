package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The fleet's two tables, in the schema of its coordination database (the
// catalog database), created by EnsureFleetTables rather than by the
// migrations: fleet_members, one row per replica with an expiry on the
// database clock, and fleet_databases, the backlog and state of each
// database as the replica that drains it last published them (package
// internal/fleet).

// The states of fleet_databases.state that the statements below write or
// test: a database its owner lets go is stopping, then released once its
// pool has closed. The owner's other states (starting, running, …) only
// pass through.
const (
	FleetStopping = "stopping"
	FleetReleased = "released"
)

// fleetTablesSQL creates the schema and the fleet's tables if missing.
const fleetTablesSQL = `CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.fleet_members (
	member_id    text PRIMARY KEY,
	expires_at   timestamptz NOT NULL,
	heartbeat_at timestamptz NOT NULL DEFAULT now(),
	joined_at    timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS {s}.fleet_databases (
	name                       text PRIMARY KEY,
	member_id                  text NOT NULL,
	state                      text NOT NULL,
	rows_by_status             jsonb,
	oldest_pending_age_seconds float8,
	sampled_at                 timestamptz,
	published_at               timestamptz NOT NULL DEFAULT now()
)`

// EnsureFleetTables creates the schema and the fleet's tables if missing.
// Replicas starting together serialise on an advisory lock (its key the
// quoted name of fleet_members, as every release has taken it), since
// concurrent CREATE … IF NOT EXISTS of one table can fail.
func (s *Store) EnsureFleetTables(ctx context.Context, db TxDB) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		lock := pgx.Identifier{s.schema, "fleet_members"}.Sanitize()
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", lock); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, s.sql(fleetTablesSQL))
		return err
	})
}

// FleetMember is a row of fleet_members as a heartbeat reads it.
type FleetMember struct {
	ID string
	// Alive: its row has not expired (on the database clock).
	Alive bool
}

// FleetHeartbeat renews member's row until now() + ttl, forgets rows
// expired more than an hour ago, and returns every row left, sorted by
// member, in one round trip.
func (s *Store) FleetHeartbeat(ctx context.Context, db DB, member string, ttl time.Duration) ([]FleetMember, error) {
	batch := &pgx.Batch{}
	batch.Queue(s.sql(`INSERT INTO {s}.fleet_members (member_id, expires_at) VALUES ($1, now() + $2 * interval '1 millisecond')
ON CONFLICT (member_id) DO UPDATE SET expires_at = EXCLUDED.expires_at, heartbeat_at = now()`), member, ttl.Milliseconds())
	batch.Queue(s.sql(`DELETE FROM {s}.fleet_members WHERE expires_at < now() - interval '1 hour'`))
	batch.Queue(s.sql(`SELECT member_id, expires_at > now() FROM {s}.fleet_members ORDER BY member_id`))
	br := db.SendBatch(ctx, batch)
	defer br.Close()
	for range 2 {
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("fleet heartbeat: %w", err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("fleet members: %w", err)
	}
	var out []FleetMember
	var m FleetMember
	if _, err := pgx.ForEachRow(rows, []any{&m.ID, &m.Alive}, func() error {
		out = append(out, m)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("fleet members: %w", err)
	}
	return out, nil
}

// FleetLeave deletes member's row and marks the databases it publishes as
// stopping (those not released yet), in one transaction.
func (s *Store) FleetLeave(ctx context.Context, db TxDB, member string) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, s.sql(`DELETE FROM {s}.fleet_members WHERE member_id = $1`), member); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, s.sql(`UPDATE {s}.fleet_databases SET state = $2, published_at = now()
 WHERE member_id = $1 AND state <> $3`), member, FleetStopping, FleetReleased)
		return err
	})
}

// FleetReleaseAll marks every database member published as released.
func (s *Store) FleetReleaseAll(ctx context.Context, db DB, member string) error {
	_, err := db.Exec(ctx, s.sql(`UPDATE {s}.fleet_databases SET state = $2, published_at = now()
 WHERE member_id = $1 AND state <> $2`), member, FleetReleased)
	return err
}

// FleetPublished is what a replica publishes of one database it drains.
type FleetPublished struct {
	Name, State string
	// RowsByStatus is the counts as JSON; nil before the engine's first
	// snapshot (the row keeps the last sample).
	RowsByStatus *string
	// OldestPending is the oldest pending row's age in seconds, and
	// SampleAge the sample's age in milliseconds, both from the snapshot.
	OldestPending *float64
	SampleAge     *float64
}

// FleetPublication is one replica's publication after a heartbeat.
type FleetPublication struct {
	Member string
	Rows   []FleetPublished
	// Released names the databases member let go whose pools have closed.
	Released []string
	// Listed, when not nil, is the database list: rows of databases not
	// in it are deleted once no one has written them for Forget, so that a
	// replica whose list is older than another's never deletes a database
	// just added.
	Listed []string
	Forget time.Duration
	// LockWait is the lock_timeout of the publication's statements.
	LockWait time.Duration
}

// FleetBacklog is a row of fleet_databases as read back.
type FleetBacklog struct {
	Name, Member, State string
	// RowsByStatus is the counts as JSON; nil when never sampled.
	RowsByStatus            []byte
	OldestPendingAgeSeconds float64
	// SampledAt is when the counts were measured, on the database clock
	// (nil: never), and SampleAgeSeconds how long before the read.
	SampledAt        *time.Time
	SampleAgeSeconds *float64
	PublishedAt      time.Time
	// MemberAlive: the publishing member's row has not expired.
	MemberAlive bool
}

// publishFleetSQL writes a publication's rows, deleting those of databases
// no longer listed (and not written for a while). A row without a sample
// keeps the last one; a stopping row never takes the row of another member
// (the new owner's).
const publishFleetSQL = `WITH gone AS (
	DELETE FROM {s}.fleet_databases WHERE $7::text[] IS NOT NULL AND NOT (name = ANY($7::text[]))
	   AND published_at < now() - $8::float8 * interval '1 millisecond'
)
INSERT INTO {s}.fleet_databases AS d (name, member_id, state, rows_by_status, oldest_pending_age_seconds, sampled_at, published_at)
SELECT u.n, $1::text, u.s, u.r::jsonb, u.o, now() - u.a * interval '1 millisecond', now()
  FROM unnest($2::text[], $3::text[], $4::text[], $5::float8[], $6::float8[]) AS u(n, s, r, o, a)
ON CONFLICT (name) DO UPDATE SET
	member_id = excluded.member_id, state = excluded.state, published_at = excluded.published_at,
	rows_by_status = coalesce(excluded.rows_by_status, d.rows_by_status),
	oldest_pending_age_seconds = coalesce(excluded.oldest_pending_age_seconds, d.oldest_pending_age_seconds),
	sampled_at = coalesce(excluded.sampled_at, d.sampled_at)
 WHERE excluded.state <> $9 OR d.member_id = excluded.member_id`

// readFleetSQL reads every published row back, with whether its member is
// alive.
const readFleetSQL = `SELECT d.name, d.member_id, d.state, d.rows_by_status, coalesce(d.oldest_pending_age_seconds, 0),
       d.sampled_at, extract(epoch FROM now() - d.sampled_at)::float8, d.published_at,
       EXISTS (SELECT 1 FROM {s}.fleet_members m WHERE m.member_id = d.member_id AND m.expires_at > now())
  FROM {s}.fleet_databases d ORDER BY d.name`

// PublishFleet writes p's rows as p.Member's, marks the databases of
// p.Released as released (where the member still holds their row), and
// returns every published row (this replica's and the others'), sorted by
// name: one round trip, one implicit transaction. A row without a sample
// keeps the last one (a new owner shows the previous owner's counts, with
// their age, until its engine measures). A stopping row never takes the
// row of another member (the new owner's). A lock held on the table
// (by a migration, an operator) cuts it on the server after p.LockWait,
// leaving the connection usable; the statements are sent in one pipeline
// (with the connection's QueryExecModeExec, no prepare round trip, which
// would wait on such a lock before lock_timeout is set).
func (s *Store) PublishFleet(ctx context.Context, db DB, p FleetPublication) ([]FleetBacklog, error) {
	names := make([]string, len(p.Rows))
	states := make([]string, len(p.Rows))
	counts := make([]*string, len(p.Rows))
	oldest := make([]*float64, len(p.Rows))
	ages := make([]*float64, len(p.Rows))
	for i, r := range p.Rows {
		names[i], states[i], counts[i], oldest[i], ages[i] = r.Name, r.State, r.RowsByStatus, r.OldestPending, r.SampleAge
	}
	batch := &pgx.Batch{}
	// Local to the batch's implicit transaction: the heartbeat's statements
	// keep waiting as they always did.
	batch.Queue(`SELECT set_config('lock_timeout', $1, true)`, fmt.Sprintf("%dms", max(p.LockWait.Milliseconds(), 1)))
	batch.Queue(s.sql(publishFleetSQL), p.Member, names, states, counts, oldest, ages, p.Listed,
		float64(p.Forget.Milliseconds()), FleetStopping)
	batch.Queue(s.sql(`UPDATE {s}.fleet_databases SET state = $3, published_at = now() WHERE member_id = $1 AND name = ANY($2::text[])`),
		p.Member, p.Released, FleetReleased)
	batch.Queue(s.sql(readFleetSQL))
	br := db.SendBatch(ctx, batch)
	defer br.Close()
	for range 3 {
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("fleet databases: %w", err)
		}
	}
	out, err := scanFleet(br.Query())
	if err != nil {
		return nil, err
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("fleet databases: %w", err)
	}
	return out, nil
}

// scanFleet reads the rows of readFleetSQL.
func scanFleet(rows pgx.Rows, err error) ([]FleetBacklog, error) {
	if err != nil {
		return nil, fmt.Errorf("fleet databases: %w", err)
	}
	out := []FleetBacklog{}
	var x FleetBacklog
	_, err = pgx.ForEachRow(rows, []any{&x.Name, &x.Member, &x.State, &x.RowsByStatus, &x.OldestPendingAgeSeconds,
		&x.SampledAt, &x.SampleAgeSeconds, &x.PublishedAt, &x.MemberAlive}, func() error {
		out = append(out, x)
		x = FleetBacklog{}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("fleet databases: %w", err)
	}
	return out, nil
}
