package producer

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestEnqueueIdempotent(t *testing.T) {
	pool := newPool(t)
	ctx := t.Context()
	in := Intent{Tuple: idemkey.Tuple{AgentRunID: "run", StepID: "s1", ToolName: "charge", BusinessScope: "inv:1"}, Payload: []byte(`{"amount": 5, "currency": "eur"}`)}
	enq := func(in Intent) (string, bool, error) {
		var key string
		var created bool
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			key, created, err = EnqueueTx(ctx, tx, in)
			return err
		})
		return key, created, err
	}
	key, created, err := enq(in)
	if err != nil || !created || key != in.Tuple.Key() {
		t.Fatalf("first enqueue: key %s created %v err %v; want key %s created", key, created, err, in.Tuple.Key())
	}
	// Same tuple, same JSON value (other key order and spacing): existing.
	again := in
	again.Payload = []byte(`{"currency":"eur","amount":5}`)
	key2, created, err := enq(again)
	if err != nil || created || key2 != key {
		t.Fatalf("second enqueue: key %s created %v err %v; want the existing key, created=false", key2, created, err)
	}
	// Same tuple, different payload: 23505 naming the key.
	diff := in
	diff.Payload = []byte(`{"amount": 6}`)
	_, _, err = enq(diff)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" || !strings.Contains(pgErr.Message, key) {
		t.Fatalf("mismatched payload: got %v, want SQLSTATE 23505 naming %s", err, key)
	}
	if n := countByStatus(t, pool)["pending"]; n != 1 {
		t.Fatalf("want exactly one pending row, got %d", n)
	}
}

func TestEnqueueRollbackLeavesNothing(t *testing.T) {
	pool := newPool(t)
	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	in := Intent{Tuple: idemkey.Tuple{AgentRunID: "r", StepID: "s", ToolName: "t"}, Payload: []byte(`{}`)}
	if _, created, err := EnqueueTx(ctx, tx, in); err != nil || !created {
		t.Fatalf("enqueue: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM drainer.outbox").Scan(&n); err != nil || n != 0 {
		t.Fatalf("rolled back enqueue left %d rows (err %v)", n, err)
	}
	// And the same tuple can be enqueued afresh.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, created, err := EnqueueTx(ctx, tx, in)
		if err == nil && !created {
			t.Error("enqueue after rollback: created=false")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestEnqueueBatch(t *testing.T) {
	pool := newPool(t)
	keys := enqueueN(t, pool, "run-b", "tool", 100)
	if len(keys) != 100 {
		t.Fatalf("got %d keys", len(keys))
	}
	seen := map[string]bool{}
	for i, k := range keys {
		want := idemkey.Tuple{AgentRunID: "run-b", StepID: "step-" + itoa(i), ToolName: "tool"}.Key()
		if k != want {
			t.Fatalf("key %d = %s, want %s (batch answers must keep input order)", i, k, want)
		}
		seen[k] = true
	}
	if len(seen) != 100 {
		t.Fatal("duplicate keys in batch")
	}
	// Re-running the batch creates nothing.
	again := enqueueN(t, pool, "run-b", "tool", 100)
	if len(again) != 100 || countByStatus(t, pool)["pending"] != 100 {
		t.Fatal("re-enqueued batch created rows")
	}
}

func TestEnqueueBadInput(t *testing.T) {
	pool := newPool(t)
	ctx := t.Context()
	cases := map[string]struct {
		in   Intent
		want string
	}{
		"empty run":     {Intent{Tuple: idemkey.Tuple{StepID: "s", ToolName: "t"}, Payload: []byte(`{}`)}, "agent_run_id must not be empty"},
		"nul byte":      {Intent{Tuple: idemkey.Tuple{AgentRunID: "r\x00", StepID: "s", ToolName: "t"}, Payload: []byte(`{}`)}, "NUL"},
		"invalid json":  {Intent{Tuple: idemkey.Tuple{AgentRunID: "r", StepID: "s", ToolName: "t"}, Payload: []byte(`{"a":`)}, "not valid JSON"},
		"json error at": {Intent{Tuple: idemkey.Tuple{AgentRunID: "r", StepID: "s", ToolName: "t"}, Payload: []byte(`{"a": 1} x`)}, "payload is not valid JSON (byte offset 10): invalid character 'x' after top-level value"},
		"deep json":     {Intent{Tuple: idemkey.Tuple{AgentRunID: "r", StepID: "s", ToolName: "t"}, Payload: []byte(strings.Repeat("[", 10001) + strings.Repeat("]", 10001))}, "payload is nested more than 10,000 levels deep"},
		"no payload":    {Intent{Tuple: idemkey.Tuple{AgentRunID: "r", StepID: "s", ToolName: "t"}}, "payload must not be empty"},
		"read only":     {Intent{Tuple: idemkey.Tuple{AgentRunID: "r", StepID: "s", ToolName: "lookup"}, Payload: []byte(`{}`), ReadOnly: true}, "read_only"},
	}
	for name, c := range cases {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, _, err := EnqueueTx(ctx, tx, c.in)
			return err
		})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want error containing %q", name, err, c.want)
		}
	}
	// The SQL function validates on its own too (for producers in other languages).
	_, err := pool.Exec(ctx, `SELECT * FROM drainer.enqueue('', 's', '', '', '{}')`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "22023" || !strings.Contains(pgErr.Message, "tool_name must not be empty") {
		t.Errorf("SQL enqueue with empty fields: %v", err)
	}
	long := strings.Repeat("x", 1025)
	_, err = pool.Exec(ctx, `SELECT * FROM drainer.enqueue('r', $1, 't', '', '{}')`, long)
	if !errors.As(err, &pgErr) || !strings.Contains(pgErr.Message, "step_id is 1025 bytes") {
		t.Errorf("SQL enqueue with long field: %v", err)
	}
	// Oversized payload against the configurable limit.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL drainer.max_payload_bytes = 100"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT * FROM drainer.enqueue('r', 's', 't', '', $1::jsonb)`, `{"x":"`+strings.Repeat("y", 200)+`"}`)
		return err
	})
	if !errors.As(err, &pgErr) || pgErr.Code != "54000" || !strings.Contains(pgErr.Message, "more than the limit of 100") {
		t.Errorf("oversized payload: %v", err)
	}
	if n := len(countByStatus(t, pool)); n != 0 {
		t.Errorf("bad input left rows: %v", countByStatus(t, pool))
	}
}

func TestResultFunction(t *testing.T) {
	pool := newPool(t)
	ctx := context.Background()
	keys := enqueueN(t, pool, "run-r", "tool", 1)
	var status string
	if err := pool.QueryRow(ctx, "SELECT status FROM drainer.result($1)", keys[0]).Scan(&status); err != nil || status != "pending" {
		t.Fatalf("result: %q %v", status, err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM drainer.result('idem_v1_unknown')").Scan(&n); err != nil || n != 0 {
		t.Fatalf("result of unknown key: %d rows, %v", n, err)
	}
}

func TestMain(m *testing.M) { dbtest.Main(m) }

// newPool returns a pool on a fresh, migrated database.
func newPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	url := dbtest.NewDatabase(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Migrate(ctx, conn, migrations.DefaultSchema, nil); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// enqueueN enqueues n intents for tool in one transaction.
func enqueueN(t testing.TB, pool *pgxpool.Pool, run, tool string, n int) []string {
	t.Helper()
	ins := make([]Intent, n)
	for i := range ins {
		ins[i] = Intent{Payload: []byte(`{"i":` + itoa(i) + `}`)}
		ins[i].AgentRunID, ins[i].StepID, ins[i].ToolName = run, "step-"+itoa(i), tool
	}
	var keys []string
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		res, err := EnqueueBatchTx(context.Background(), tx, ins)
		for _, r := range res {
			keys = append(keys, r.Key)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func itoa(i int) string { return strconv.Itoa(i) }

func countByStatus(t testing.TB, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT status, count(*) FROM drainer.outbox GROUP BY status")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	var s string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&s, &n}, func() error { out[s] = n; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}
