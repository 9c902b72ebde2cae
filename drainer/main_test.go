package drainer

import (
	"context"
	"testing"

	"github.com/drainer-io/drainer/internal/dbtest"
	"github.com/drainer-io/drainer/migrations"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

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
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
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

func itoa(i int) string {
	const digits = "0123456789"
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{digits[i%10]}, b...)
	}
	return string(b)
}

type rowState struct {
	Status         string
	Attempts       int
	LastError      *string
	Response       []byte
	ResponseStatus *int
	DueInMs        float64
}

func getRow(t testing.TB, pool *pgxpool.Pool, key string) rowState {
	t.Helper()
	var r rowState
	err := pool.QueryRow(context.Background(), `SELECT status, attempts, last_error, response, response_status,
	        extract(epoch FROM next_attempt_at - now()) * 1000 FROM drainer.outbox WHERE key = $1`, key).
		Scan(&r.Status, &r.Attempts, &r.LastError, &r.Response, &r.ResponseStatus, &r.DueInMs)
	if err != nil {
		t.Fatalf("row %s: %v", key, err)
	}
	return r
}

func countByStatus(t testing.TB, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT status, count(*) FROM drainer.outbox GROUP BY status")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		out[s] = n
	}
	return out
}
