package store_test

import (
	"context"
	"testing"

	"github.com/drainer-io/drainer/store"
	"github.com/drainer-io/drainer/store/storetest"
	"github.com/jackc/pgx/v5"
)

// TestSessionDefaults: drainer's sessions run with jit off, its
// application_name, and an idle_in_transaction_session_timeout, so a
// session whose replica was cut off mid-transaction (a partition: the
// server's side stays open) ends within store.IdleInTransaction instead of
// holding its locks and snapshot until the server's keepalive notices;
// what the database url sets wins.
func TestSessionDefaults(t *testing.T) {
	t.Parallel()
	base := storetest.NewPool(t).Config().ConnConfig
	show := func(cc *pgx.ConnConfig) (app, jit, idle string) {
		t.Helper()
		conn, err := pgx.ConnectConfig(t.Context(), cc)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if err := conn.QueryRow(t.Context(), `SELECT current_setting('application_name'), current_setting('jit'),
			current_setting('idle_in_transaction_session_timeout')`).Scan(&app, &jit, &idle); err != nil {
			t.Fatal(err)
		}
		return app, jit, idle
	}
	cc := base.Copy()
	delete(cc.RuntimeParams, "application_name")
	delete(cc.RuntimeParams, "jit")
	delete(cc.RuntimeParams, "idle_in_transaction_session_timeout")
	store.SessionDefaults(cc)
	if app, jit, idle := show(cc); app != "drainer" || jit != "off" || idle != "1min" {
		t.Errorf("defaults: application_name %q, jit %q, idle_in_transaction_session_timeout %q; want drainer, off, 1min", app, jit, idle)
	}
	own := base.Copy()
	own.RuntimeParams["idle_in_transaction_session_timeout"] = "5000"
	store.SessionDefaults(own)
	if _, _, idle := show(own); idle != "5s" {
		t.Errorf("the url's idle_in_transaction_session_timeout 5000 became %q", idle)
	}
}
