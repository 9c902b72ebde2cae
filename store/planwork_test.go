package store

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/jackc/pgx/v5"
)

// migratedConn connects to a new database holding drainer's schema, and
// returns the connection (closed at the test's end) and its store.
func migratedConn(t *testing.T) (*pgx.Conn, *Store) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	if _, err := migrations.Migrate(ctx, conn, migrations.DefaultSchema, nil); err != nil {
		t.Fatal(err)
	}
	return conn, MustNew(migrations.DefaultSchema)
}

// PlanWork is what a plan did, machine-independent: the rows every node
// of it returned, each node's rows times its loops, summed over the plan
// (subplans included), from EXPLAIN (ANALYZE, FORMAT JSON).
func PlanWork(t testing.TB, plan []byte) (work float64) {
	t.Helper()
	var doc []struct {
		Plan json.RawMessage `json:"Plan"`
	}
	if err := json.Unmarshal(plan, &doc); err != nil || len(doc) != 1 {
		t.Fatalf("EXPLAIN output: %v: %.200s", err, plan)
	}
	var walk func(raw json.RawMessage)
	walk = func(raw json.RawMessage) {
		var n struct {
			Rows  float64           `json:"Actual Rows"`
			Loops float64           `json:"Actual Loops"`
			Plans []json.RawMessage `json:"Plans"`
		}
		if err := json.Unmarshal(raw, &n); err != nil {
			t.Fatalf("EXPLAIN node: %v", err)
		}
		work += n.Rows * n.Loops
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(doc[0].Plan)
	return work
}
