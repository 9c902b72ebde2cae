package ops

import (
	"context"
	"strconv"
	"testing"

	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/producer"
	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestOtherSchema: a client given the store of another schema (`--schema`)
// reads and changes that schema's rows, audit and pauses.
func TestOtherSchema(t *testing.T) {
	t.Parallel()
	const schema = "ops_alt"
	ctx := t.Context()
	url := dbtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Migrate(ctx, conn, schema, nil); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ins := []producer.Intent{{Payload: []byte(`{}`)}, {Payload: []byte(`{}`)}}
	for i := range ins {
		ins[i].AgentRunID, ins[i].StepID, ins[i].ToolName = "r1", "s"+strconv.Itoa(i), "charge"
	}
	var keys []string
	err = pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		res, err := producer.Producer{Schema: schema}.EnqueueBatchTx(ctx, tx, ins)
		for _, r := range res {
			keys = append(keys, r.Key)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	c := New(pool, store.MustNew(schema))
	if c.Schema() != schema {
		t.Fatalf("Schema() = %q", c.Schema())
	}
	page, err := c.List(ctx, Filter{Run: "r1"}, 0)
	if err != nil || len(page.Rows) != 2 {
		t.Fatalf("list: %d rows, %v; want 2", len(page.Rows), err)
	}
	if _, err := c.Cancel(ctx, keys[0], alice, false); err != nil {
		t.Fatal(err)
	}
	in, err := c.Inspect(ctx, keys[0])
	if err != nil || in.Status != outbox.StatusCancelled || len(in.Audit) == 0 {
		t.Fatalf("inspect after cancel: %+v, %v", in, err)
	}
	if _, err := c.Pause(ctx, TargetRoute, "charge", alice); err != nil {
		t.Fatal(err)
	}
	if ps, err := c.Pauses(ctx); err != nil || len(ps) != 1 || ps[0].Name != "charge" {
		t.Fatalf("pauses: %+v, %v", ps, err)
	}
	if _, err := c.Abort(ctx, "r1", alice); err != nil {
		t.Fatal(err)
	}
	if v, err := c.VerifyAudit(ctx, 0); err != nil || !v.OK || v.Entries == 0 {
		t.Fatalf("verify audit: %+v, %v", v, err)
	}
	var other bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('drainer.outbox') IS NOT NULL`).Scan(&other); err != nil || other {
		t.Fatalf("the default schema exists (%v, %v): the client wrote outside its own", other, err)
	}
}
