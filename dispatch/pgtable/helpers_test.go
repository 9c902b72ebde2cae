package pgtable

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/drainer-io/drainer/tooling/dbtest"
)

// testDB is a fresh database with a pool the test uses to set it up and to
// look at what the adapter wrote.
type testDB struct {
	url  string
	pool *pgxpool.Pool
}

func newTestDB(t testing.TB) *testDB {
	t.Helper()
	url := dbtest.NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // before the database is dropped
	return &testDB{url: url, pool: pool}
}

func (d *testDB) exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := d.pool.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// createTable creates a recipient table with RecipientTableDDL.
func (d *testDB) createTable(t testing.TB, name ...string) string {
	t.Helper()
	quoted := pgx.Identifier(name).Sanitize()
	if len(name) == 2 {
		d.exec(t, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{name[0]}.Sanitize())
	}
	d.exec(t, fmt.Sprintf(RecipientTableDDL, quoted))
	return quoted
}

// newTestAdapter builds an adapter on the table ("effects" by default).
func (d *testDB) newTestAdapter(t testing.TB, edit func(*Config)) *Adapter {
	t.Helper()
	cfg := Config{DSN: d.url, Table: "effects", Timeout: 5 * time.Second}
	if edit != nil {
		edit(&cfg)
	}
	a, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// row is a recipient row as stored.
type row struct {
	AgentRunID, StepID, ToolName, BusinessScope, Payload string
}

func (d *testDB) row(t testing.TB, table, key string) (row, bool) {
	t.Helper()
	var r row
	err := d.pool.QueryRow(context.Background(),
		"SELECT agent_run_id, step_id, tool_name, business_scope, payload::text FROM "+table+" WHERE key = $1", key).
		Scan(&r.AgentRunID, &r.StepID, &r.ToolName, &r.BusinessScope, &r.Payload)
	if err == pgx.ErrNoRows {
		return r, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return r, true
}
