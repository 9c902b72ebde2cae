package store_test

import (
	"context"
	"fmt"
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
	viaOptions := base.Copy()
	delete(viaOptions.RuntimeParams, "idle_in_transaction_session_timeout")
	viaOptions.RuntimeParams["options"] = "-c idle_in_transaction_session_timeout=7s"
	store.SessionDefaults(viaOptions)
	if _, _, idle := show(viaOptions); idle != "7s" {
		t.Errorf("the url's options -c idle_in_transaction_session_timeout=7s became %q", idle)
	}
}

// TestSessionDefaultsOverDatabaseDefaults: a database whose own defaults
// suit its applications, not drainer (serializable transactions, a 50 ms
// statement_timeout, a 10 ms lock_timeout, a 1 s idle_session_timeout),
// does not impose them on drainer's sessions: their transactions are read
// committed (an ordered scope's next row is made due as the one before
// settles, not once its hold ends) and their statements, lock waits and
// idle listening sessions are bounded by drainer's own deadlines. What the
// database url sets, as a parameter or in options, still wins, and a
// setting whose name merely contains another's (deadlock_timeout) does not
// count as it.
func TestSessionDefaultsOverDatabaseDefaults(t *testing.T) {
	t.Parallel()
	pool := storetest.NewPool(t)
	var db string
	if err := pool.QueryRow(t.Context(), `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	for _, set := range []string{"default_transaction_isolation = 'serializable'", "statement_timeout = '50ms'",
		"lock_timeout = '10ms'", "idle_session_timeout = '1s'"} {
		if _, err := pool.Exec(t.Context(), fmt.Sprintf("ALTER DATABASE %s SET %s", pgx.Identifier{db}.Sanitize(), set)); err != nil {
			t.Fatal(err)
		}
	}
	show := func(cc *pgx.ConnConfig) string {
		t.Helper()
		conn, err := pgx.ConnectConfig(t.Context(), cc)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		var got string
		if err := conn.QueryRow(t.Context(), `SELECT concat_ws(' ', current_setting('transaction_isolation'),
			current_setting('statement_timeout'), current_setting('lock_timeout'), current_setting('idle_session_timeout'))`).Scan(&got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	bare := pool.Config().ConnConfig.Copy()
	if got := show(bare); got != "serializable 50ms 10ms 1s" {
		t.Fatalf("the database's own defaults read %q: the test's ALTER DATABASE did not apply", got)
	}
	cc := pool.Config().ConnConfig.Copy()
	store.SessionDefaults(cc)
	if got := show(cc); got != "read committed 0 0 0" {
		t.Errorf("drainer's session: isolation, statement_timeout, lock_timeout, idle_session_timeout = %q; want read committed 0 0 0", got)
	}
	own := pool.Config().ConnConfig.Copy()
	own.RuntimeParams["statement_timeout"] = "30s"
	own.RuntimeParams["options"] = "-c deadlock_timeout=2s --default-transaction-isolation=repeatable\\ read"
	store.SessionDefaults(own)
	if got := show(own); got != "repeatable read 30s 0 0" {
		t.Errorf("with the url's own statement_timeout and isolation: %q; want repeatable read 30s 0 0", got)
	}
}
