package store

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/outbox"
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

// BeginDB is a DB that can begin a transaction (a pool or a connection),
// or a savepoint (a transaction).
type BeginDB interface {
	DB
	Begin(ctx context.Context) (pgx.Tx, error)
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
	text   *strings.Replacer // what sql places into a statement
	// expanded holds each statement sql has expanded (template → text),
	// so that a statement is expanded once per Store; cached counts them.
	expanded *sync.Map
	cached   *atomic.Int64
}

// New returns the store of schema (migrations.DefaultSchema when empty).
func New(schema string) (*Store, error) {
	if schema == "" {
		schema = migrations.DefaultSchema
	}
	if err := migrations.ValidateSchema(schema); err != nil {
		return nil, err
	}
	return &Store{
		schema:   schema,
		text:     strings.NewReplacer(append([]string{"{s}", schema}, vocabularySQL...)...),
		expanded: new(sync.Map),
		cached:   new(atomic.Int64),
	}, nil
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

// sql places the schema and the vocabulary into a statement. Statements
// are constants written with {s} for the schema, the only way the schema
// enters SQL text (a schema name is validated as a plain identifier by
// New), and {StatusPending}, {KindForward}, {SagaDone}, … for the words of
// the outbox vocabulary, spelt as SQL literals by package outbox (a
// literal, not a parameter, so that the planner matches the partial
// indexes on status).
//
// Each distinct statement is expanded once per Store and kept. The
// statements are constants, or a constant with one of a fixed set of
// conditions (Filter.where, the claim's clauses), so they are few; past
// maxExpanded (a bug) sql expands without keeping, so memory stays bounded.
func (s *Store) sql(stmt string) string {
	if text, ok := s.expanded.Load(stmt); ok {
		return text.(string)
	}
	text := s.text.Replace(stmt)
	if s.cached.Add(1) > maxExpanded {
		s.cached.Add(-1) // full: expanded, not kept
	} else if _, loaded := s.expanded.LoadOrStore(stmt, text); loaded {
		s.cached.Add(-1) // another caller kept it first
	}
	return text
}

// maxExpanded bounds how many expanded statements a Store keeps.
const maxExpanded = 4096

// vocabularySQL pairs each placeholder of the outbox vocabulary with its
// SQL literal.
var vocabularySQL = []string{
	"{StatusPending}", outbox.StatusPending.SQL(),
	"{StatusInFlight}", outbox.StatusInFlight.SQL(),
	"{StatusSucceeded}", outbox.StatusSucceeded.SQL(),
	"{StatusFailed}", outbox.StatusFailed.SQL(),
	"{StatusOutcomeUnknown}", outbox.StatusOutcomeUnknown.SQL(),
	"{StatusCompensated}", outbox.StatusCompensated.SQL(),
	"{StatusCompensationFailed}", outbox.StatusCompensationFailed.SQL(),
	"{StatusCancelled}", outbox.StatusCancelled.SQL(),
	"{KindForward}", outbox.KindSQL(outbox.KindForward),
	"{KindCompensation}", outbox.KindSQL(outbox.KindCompensation),
	"{SagaWaiting}", outbox.SagaWaiting.SQL(),
	"{SagaCompensating}", outbox.SagaCompensating.SQL(),
	"{SagaHalted}", outbox.SagaHalted.SQL(),
	"{SagaDone}", outbox.SagaDone.SQL(),
}

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

// SchemaVersion returns the schema's migration version, 0 when it was
// never migrated.
func (s *Store) SchemaVersion(ctx context.Context, db DB) (int, error) {
	var exists bool
	if err := db.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", s.schema+".schema_version").Scan(&exists); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var v int
	if err := db.QueryRow(ctx, s.sql("SELECT coalesce(max(version), 0) FROM {s}.schema_version")).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}
