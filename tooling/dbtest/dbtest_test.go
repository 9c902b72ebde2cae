package dbtest_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) {
	dbtest.Main(m)
}

func connect(t *testing.T, dbURL string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func databaseName(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

func tableExists(t *testing.T, conn *pgx.Conn, table string) bool {
	t.Helper()
	var exists bool
	if err := conn.QueryRow(t.Context(), "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	return exists
}

func TestNewDatabaseIsolated(t *testing.T) {
	t.Parallel()
	urlA, urlB := dbtest.NewDatabase(t), dbtest.NewDatabase(t)
	if databaseName(t, urlA) == databaseName(t, urlB) {
		t.Fatalf("both databases are named %q", databaseName(t, urlA))
	}
	a, b := connect(t, urlA), connect(t, urlB)

	if _, err := a.Exec(t.Context(), "CREATE TABLE outbox (id bigint PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if !tableExists(t, a, "outbox") {
		t.Error("table missing from the database it was created in")
	}
	if tableExists(t, b, "outbox") {
		t.Error("table created in one database shows up in the other")
	}
}

func TestNewDatabaseDroppedAfterCleanup(t *testing.T) {
	t.Parallel()
	var name string
	var straggler *pgx.Conn
	t.Run("owner", func(t *testing.T) {
		dbURL := dbtest.NewDatabase(t)
		name = databaseName(t, dbURL)
		conn := connect(t, dbURL) // closed by a cleanup that runs before the drop
		var current string
		if err := conn.QueryRow(t.Context(), "SELECT current_database()").Scan(&current); err != nil {
			t.Fatal(err)
		}
		if current != name {
			t.Errorf("connected to %q, want %q", current, name)
		}
		// A connection still open when the database is dropped must not
		// stop the drop; it is closed only after the subtest.
		var err error
		if straggler, err = pgx.Connect(t.Context(), dbURL); err != nil {
			t.Fatal(err)
		}
	})
	if straggler != nil {
		_ = straggler.Close(context.Background()) // terminated by the drop
	}

	other := connect(t, dbtest.NewDatabase(t))
	var n int
	if err := other.QueryRow(t.Context(), "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("database %q still exists after its test's cleanup", name)
	}
}

func TestNewDatabaseParallel(t *testing.T) {
	t.Parallel()
	for i := range 8 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			conn := connect(t, dbtest.NewDatabase(t))
			if _, err := conn.Exec(t.Context(), "CREATE TABLE t (v int)"); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(t.Context(), "INSERT INTO t VALUES ($1)", i); err != nil {
				t.Fatal(err)
			}
			var count int
			if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM t").Scan(&count); err != nil || count != 1 {
				t.Errorf("count = %d, %v; want 1 row in a fresh database", count, err)
			}
		})
	}
}

func TestServerURL(t *testing.T) {
	t.Parallel()
	name := databaseName(t, dbtest.NewDatabase(t))
	conn := connect(t, dbtest.ServerURL(t, name))
	var current string
	if err := conn.QueryRow(t.Context(), "SELECT current_database()").Scan(&current); err != nil {
		t.Fatal(err)
	}
	if current != name {
		t.Errorf("ServerURL(%q) connects to %q", name, current)
	}
}
