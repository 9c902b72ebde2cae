package storetest

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Recorder is a pgx tracer that keeps the statements a pool runs, with
// their arguments (TracedPool).
type Recorder struct {
	mu   sync.Mutex
	list []Statement
}

// Statement is one statement a Recorder kept.
type Statement struct {
	SQL  string
	Args []any
}

// TraceQueryStart keeps the statement.
func (r *Recorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	r.list = append(r.list, Statement{d.SQL, d.Args})
	r.mu.Unlock()
	return ctx
}

// TraceQueryEnd does nothing.
func (r *Recorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Take returns the statements kept since the last Take and forgets them.
func (r *Recorder) Take() []Statement {
	r.mu.Lock()
	defer r.mu.Unlock()
	list := r.list
	r.list = nil
	return list
}

// TracedPool returns a second pool on pool's database whose statements r
// keeps; it is closed when t ends.
func TracedPool(t testing.TB, pool *pgxpool.Pool, r *Recorder) *pgxpool.Pool {
	t.Helper()
	cfg := pool.Config().Copy()
	cfg.ConnConfig.Tracer = r
	traced, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(traced.Close)
	return traced
}

// ReturnedBytes runs stmts again on pool and returns the bytes of the
// values they return: what they carried from the database.
func ReturnedBytes(t testing.TB, pool *pgxpool.Pool, stmts []Statement) int {
	t.Helper()
	n := 0
	for _, s := range stmts {
		rows, err := pool.Query(context.Background(), s.SQL, s.Args...)
		if err != nil {
			t.Fatalf("%s: %v", s.SQL, err)
		}
		for rows.Next() {
			for _, v := range rows.RawValues() {
				n += len(v)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", s.SQL, err)
		}
	}
	return n
}
