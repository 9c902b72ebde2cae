package gateway_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/gateway"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestAbortRunWhenTheDatabaseFails: drainer_abort_run whose statement the
// database does not answer in time is an internal error (-32603) saying
// it may not be recorded and to call again, not invalid params; and one whose
// connection the server ended runs again on a live one, as the other
// statements of a call do. Before, both were -32602 "could not abort run".
func TestAbortRunWhenTheDatabaseFails(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	const app = "drainer gateway abort test"
	cfg, err := pgxpool.ParseConfig(pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	gwPool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gwPool.Close)
	d := newDirect(t, gwPool, gateway.Config{Wait: time.Second, AbortTool: true})
	s := d.client(t, "run-abort-db")
	abort := func() (*sdk.CallToolResult, error) {
		return s.CallTool(context.Background(), &sdk.CallToolParams{Name: gateway.AbortToolName, Arguments: map[string]any{"reason": "wrong card"}})
	}

	// The runs table locked: the abort waits past the call's bounds.
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE drainer.runs IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	_, err = abort()
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInternalError ||
		!strings.Contains(rpcErr.Message, "may or may not have been recorded") || !strings.Contains(rpcErr.Message, "call drainer_abort_run again") {
		t.Fatalf("an abort the database did not answer: %v; want -32603 saying it may not be recorded, to call again", err)
	}
	// The statement given up on may still finish once the lock goes (its
	// cancel races the release): the answer promised nothing either way.
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// Every connection of the gateway's pool ended by the server: the
	// abort runs again on a live one.
	if err := gwPool.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	var killed int
	if err := pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1`, app).Scan(&killed); err != nil || killed == 0 {
		t.Fatalf("ended %d connections (%v); want the gateway pool's", killed, err)
	}
	res, err := abort()
	if err != nil || res.IsError || !strings.Contains(text(res), "Run run-abort-db is aborted") {
		t.Fatalf("an abort after the pool's connections were ended: %v %v; want the run aborted", err, res)
	}
}
