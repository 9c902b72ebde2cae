package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/drainer-io/drainer/store"
	"github.com/jackc/pgx/v5"
)

// Client runs operator actions on the outbox of one schema. Every
// statement it runs is the store's.
type Client struct {
	db store.TxDB
	st *store.Store
}

// New returns a Client acting through db (a pool or a connection) on the
// schema of st.
func New(db store.TxDB, st *store.Store) *Client {
	return &Client{db: db, st: st}
}

// Schema returns the schema the client works on.
func (c *Client) Schema() string { return c.st.Schema() }

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
		err := c.st.SetActor(ctx, tx, store.Actor{Name: who.Actor, Reason: who.Reason, Action: "operator:" + verb})
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
