package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/drainer-io/drainer/migrations"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what the package needs of a pool or connection
// (*pgxpool.Pool and *pgx.Conn both qualify).
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// querier is the read side shared by DB and pgx.Tx.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Client runs operator actions on the outbox in one schema.
type Client struct {
	db     DB
	schema string
}

// New returns a Client for schema (migrations.DefaultSchema when empty).
func New(db DB, schema string) (*Client, error) {
	if schema == "" {
		schema = migrations.DefaultSchema
	}
	if err := migrations.ValidateSchema(schema); err != nil {
		return nil, err
	}
	return &Client{db: db, schema: schema}, nil
}

// Schema returns the schema the client works on.
func (c *Client) Schema() string { return c.schema }

// sql places the schema into a statement: {s} stands for it.
func (c *Client) sql(stmt string) string { return strings.ReplaceAll(stmt, "{s}", c.schema) }

// Who is the operator behind an action and the reason they gave.
type Who struct {
	Actor  string
	Reason string
}

// ErrNoActor is returned by actions given an empty actor.
var ErrNoActor = errors.New("an operator action needs an actor")

func (w Who) validate() error {
	if strings.TrimSpace(w.Actor) == "" {
		return ErrNoActor
	}
	return nil
}

// begin runs fn in a transaction whose audit settings name who and the
// action (recorded as "operator:<verb>").
func (c *Client) begin(ctx context.Context, verb string, who Who, fn func(pgx.Tx) error) error {
	if err := who.validate(); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, c.db, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT set_config('drainer.actor', $1, true), set_config('drainer.reason', $2, true),
		        set_config('drainer.action', $3, true)`, who.Actor, who.Reason, "operator:"+verb)
		if err != nil {
			return fmt.Errorf("%s: set audit settings: %w", verb, err)
		}
		return fn(tx)
	})
}

// readOnly runs fn in a read-only REPEATABLE READ transaction, so the
// queries of one answer see one snapshot.
func (c *Client) readOnly(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, c.db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, fn)
}

// notify wakes the daemons: rows became due, or a saga can move.
func (c *Client) notify(ctx context.Context, q querier) error {
	_, err := q.Exec(ctx, "SELECT pg_notify($1, '')", c.schema+".outbox")
	return err
}
