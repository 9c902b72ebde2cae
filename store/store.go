package store

import (
	"context"
	"strings"

	"github.com/drainer-io/drainer/migrations"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what the store needs to run a statement: *pgxpool.Pool,
// *pgxpool.Conn, *pgx.Conn and pgx.Tx all qualify. Every method takes the
// DB it runs on, so a caller decides what shares a transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// TxDB is a DB that can also begin a transaction (a pool or a connection).
type TxDB interface {
	DB
	Begin(ctx context.Context) (pgx.Tx, error)
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Store runs drainer's statements on the tables of one schema. It holds no
// connection and is safe for concurrent use.
type Store struct {
	schema string
}

// New returns the store of schema (migrations.DefaultSchema when empty).
func New(schema string) (*Store, error) {
	if schema == "" {
		schema = migrations.DefaultSchema
	}
	if err := migrations.ValidateSchema(schema); err != nil {
		return nil, err
	}
	return &Store{schema: schema}, nil
}

// MustNew is New for a schema already validated (it panics otherwise).
func MustNew(schema string) *Store {
	s, err := New(schema)
	if err != nil {
		panic("store: " + err.Error())
	}
	return s
}

// Schema returns the schema the store works on.
func (s *Store) Schema() string { return s.schema }

// sql places the schema into a statement. Statements are constants written
// with {s} for the schema, the only way the schema enters SQL text; a
// schema name is validated as a plain identifier by New.
func (s *Store) sql(stmt string) string { return strings.ReplaceAll(stmt, "{s}", s.schema) }

// OutboxChannel is the LISTEN/NOTIFY channel that says rows became due.
func (s *Store) OutboxChannel() string { return s.schema + ".outbox" }

// SagaChannel is the channel whose payload names a run whose saga may move.
func (s *Store) SagaChannel() string { return s.schema + ".saga" }

// Notify wakes the daemons: rows became due. In the caller's transaction
// it is sent at commit.
func (s *Store) Notify(ctx context.Context, db DB) error {
	_, err := db.Exec(ctx, "SELECT pg_notify($1, '')", s.OutboxChannel())
	return err
}

// NotifySaga tells the daemons that run's saga may move.
func (s *Store) NotifySaga(ctx context.Context, db DB, run string) error {
	_, err := db.Exec(ctx, "SELECT pg_notify($1, $2)", s.SagaChannel(), run)
	return err
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
