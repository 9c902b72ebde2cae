package migrations

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// oldSchema is a database at an older schema version, driven as that
// release's producers and daemons drove it: the upgrade tests' common
// ground.
type oldSchema struct {
	t    *testing.T
	conn *pgx.Conn
	// release names the old release in failures; claimSQL is its claim
	// ($1 limit, $2 lease in ms, $3 replica).
	release  string
	claimSQL string
}

func openOldSchema(t *testing.T, version int32, release, claimSQL string) *oldSchema {
	t.Helper()
	return &oldSchema{t: t, conn: connectAtVersion(t, version), release: release, claimSQL: claimSQL}
}

func (o *oldSchema) exec(sql string, args ...any) {
	o.t.Helper()
	if _, err := o.conn.Exec(context.Background(), sql, args...); err != nil {
		o.t.Fatalf("%.80s: %v", sql, err)
	}
}

// count runs sql, which answers one number.
func (o *oldSchema) count(sql string, args ...any) int {
	o.t.Helper()
	var n int
	if err := o.conn.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		o.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// problems is what audit_verify reports now, by key (a key's problems
// joined, each followed by "; ").
func (o *oldSchema) problems(when string) map[string]string {
	o.t.Helper()
	rows, err := o.conn.Query(context.Background(), `SELECT key, problem FROM drainer.audit_verify(1000)`)
	if err != nil {
		o.t.Fatalf("audit_verify %s: %v", when, err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var key, problem string
		if err := rows.Scan(&key, &problem); err != nil {
			o.t.Fatal(err)
		}
		out[key] += problem + "; "
	}
	if err := rows.Err(); err != nil {
		o.t.Fatalf("audit_verify %s: %v", when, err)
	}
	return out
}

// keyOf is the key of a tuple with an empty business scope.
func (o *oldSchema) keyOf(run, step, tool string) string {
	o.t.Helper()
	var k string
	if err := o.conn.QueryRow(context.Background(), `SELECT drainer.idempotency_key($1, $2, $3, '')`, run, step, tool).Scan(&k); err != nil {
		o.t.Fatal(err)
	}
	return k
}

// oldClaimed is a row the old release's claim leased.
type oldClaimed struct {
	Seq       int64
	Key, Kind string
	Token     pgtype.UUID
}

// claim runs the old release's claim and returns what it leased.
func (o *oldSchema) claim(limit int) []oldClaimed {
	o.t.Helper()
	rows, err := o.conn.Query(context.Background(), o.claimSQL, limit, 60000, "old-replica")
	if err != nil {
		o.t.Fatalf("%s claim: %v", o.release, err)
	}
	var out []oldClaimed
	for rows.Next() {
		v, err := rows.Values()
		if err != nil {
			o.t.Fatal(err)
		}
		out = append(out, oldClaimed{Seq: v[0].(int64), Key: v[1].(string), Kind: v[6].(string), Token: pgtype.UUID{Bytes: v[9].([16]byte), Valid: true}})
	}
	if err := rows.Err(); err != nil {
		o.t.Fatalf("%s claim: %v", o.release, err)
	}
	return out
}

// seedRowsInFlight writes, as the old release would, a row in flight
// (leased by its claim, which it returns), one waiting, one parked, a
// saga whose compensation is queued (run r2) and a pruned key (run r3).
func (o *oldSchema) seedRowsInFlight() oldClaimed {
	o.t.Helper()
	o.exec(`SELECT drainer.enqueue('r1', 'flight', 'charge', '', '{"amount": 1}')`)
	first := o.claim(1)
	if len(first) != 1 {
		o.t.Fatalf("%s claim before the upgrade leased %d rows", o.release, len(first))
	}
	o.exec(`SELECT drainer.enqueue('r1', 'waiting', 'charge', '', '{"amount": 2}')`)
	o.exec(`SELECT drainer.enqueue('r1', 'parked', 'ship', '', '{"order": 7}')`)
	o.exec(`UPDATE drainer.outbox SET status = 'outcome_unknown', attempts = 1, updated_at = now() WHERE step_id = 'parked'`)
	o.exec(`SELECT drainer.enqueue('r2', 'a', 'charge', '', '{"amount": 3}')`)
	o.exec(`UPDATE drainer.outbox SET status = 'succeeded', attempts = 1, response = '{"id": "ch_1"}', updated_at = now() WHERE agent_run_id = 'r2'`)
	o.exec(`SELECT drainer.abort_run_internal('r2', 'wrong customer', 'operator:alice')`)
	var state string
	if err := o.conn.QueryRow(context.Background(), `SELECT drainer.advance_saga('r2', ARRAY['charge'], ARRAY['refund'])`).Scan(&state); err != nil || state != "compensating" {
		o.t.Fatalf("saga before the upgrade: %q, %v", state, err)
	}
	o.exec(`SELECT drainer.enqueue('r3', 'old', 'charge', '', '{"amount": 4}')`)
	o.exec(`UPDATE drainer.outbox SET status = 'succeeded', attempts = 1, updated_at = now() - interval '1 day' WHERE agent_run_id = 'r3'`)
	o.exec(`SELECT drainer.prune_rows('succeeded', now() - interval '1 hour', 100)`)
	return first[0]
}

// outboxRow is what the upgrade must keep of each row.
type outboxRow struct {
	Key, Status string
	Attempts    int
	Payload     string
}

// snapshot reads every row of drainer.outbox by key.
func (o *oldSchema) snapshot() map[string]outboxRow {
	o.t.Helper()
	rows, err := o.conn.Query(context.Background(), `SELECT key, status, attempts, payload::text FROM drainer.outbox ORDER BY seq`)
	if err != nil {
		o.t.Fatal(err)
	}
	out := map[string]outboxRow{}
	var r outboxRow
	if _, err := pgx.ForEachRow(rows, []any{&r.Key, &r.Status, &r.Attempts, &r.Payload}, func() error { out[r.Key] = r; return nil }); err != nil {
		o.t.Fatal(err)
	}
	return out
}

// sameRows fails the test for every row the upgrade lost or changed.
func (o *oldSchema) sameRows(before, after map[string]outboxRow) {
	o.t.Helper()
	for k, r := range before {
		if after[k] != r {
			o.t.Errorf("row %s: %+v before the upgrade, %+v after", k, r, after[k])
		}
	}
	if len(after) != len(before) {
		o.t.Errorf("%d rows after the upgrade, %d before", len(after), len(before))
	}
}
