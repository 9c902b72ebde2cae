package fleet

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// membership is the fleet's list of live replicas: one row per replica in
// <schema>.fleet_members of the coordination database, its expiry set from
// the database clock at every heartbeat. A replica is alive while its row
// has not expired; one that stops deletes its row, so the others take its
// databases at their next heartbeat.
type membership struct {
	pool   *pgxpool.Pool
	table  string // quoted schema.fleet_members
	schema string
	id     string
}

func newMembership(pool *pgxpool.Pool, schema, id string) *membership {
	return &membership{pool: pool, schema: schema, id: id,
		table: pgx.Identifier{schema, "fleet_members"}.Sanitize()}
}

// ensure creates the schema and the tables (fleet_members and
// fleet_databases) if missing. Replicas starting
// together serialise on an advisory lock, since concurrent CREATE … IF NOT
// EXISTS of one table can fail.
func (m *membership) ensure(ctx context.Context) error {
	return pgx.BeginFunc(ctx, m.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", m.table); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{m.schema}.Sanitize()+`;
CREATE TABLE IF NOT EXISTS `+m.table+` (
	member_id    text PRIMARY KEY,
	expires_at   timestamptz NOT NULL,
	heartbeat_at timestamptz NOT NULL DEFAULT now(),
	joined_at    timestamptz NOT NULL DEFAULT now()
);
`+newBacklogs(m.schema).createSQL())
		return err
	})
}

// beat renews this replica's row until now() + ttl, forgets rows expired
// long ago, and returns the live members (this one included), sorted, and
// those whose row has expired (a member that left deleted its row).
func (m *membership) beat(ctx context.Context, ttl time.Duration) (members, expired []string, err error) {
	batch := &pgx.Batch{}
	batch.Queue(`INSERT INTO `+m.table+` (member_id, expires_at) VALUES ($1, now() + $2 * interval '1 millisecond')
ON CONFLICT (member_id) DO UPDATE SET expires_at = EXCLUDED.expires_at, heartbeat_at = now()`, m.id, ttl.Milliseconds())
	batch.Queue(`DELETE FROM ` + m.table + ` WHERE expires_at < now() - interval '1 hour'`)
	batch.Queue(`SELECT member_id, expires_at > now() FROM ` + m.table + ` ORDER BY member_id`)
	br := m.pool.SendBatch(ctx, batch)
	defer br.Close()
	for range 2 {
		if _, err := br.Exec(); err != nil {
			return nil, nil, fmt.Errorf("fleet heartbeat: %w", err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, nil, fmt.Errorf("fleet members: %w", err)
	}
	var id string
	var alive bool
	_, err = pgx.ForEachRow(rows, []any{&id, &alive}, func() error {
		if alive {
			members = append(members, id)
		} else {
			expired = append(expired, id)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("fleet members: %w", err)
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
	return pgx.BeginFunc(ctx, m.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM `+m.table+` WHERE member_id = $1`, m.id); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE `+newBacklogs(m.schema).table+` SET state = $2, published_at = now()
 WHERE member_id = $1 AND state <> $3`, m.id, stateStopping, stateReleased)
		return err
	})
}

// releaseAll marks every database this replica published as released: its
// engines have stopped and their pools closed.
func (m *membership) releaseAll(ctx context.Context) error {
	_, err := m.pool.Exec(ctx, `UPDATE `+newBacklogs(m.schema).table+` SET state = $2, published_at = now()
 WHERE member_id = $1 AND state <> $2`, m.id, stateReleased)
	return err
}
