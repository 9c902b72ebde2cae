package catalog

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// catalogDB is a catalog database holding a tenants table.
type catalogDB struct {
	t    *testing.T
	url  string
	name string
	conn *pgx.Conn
}

func newCatalogDB(t *testing.T) *catalogDB {
	t.Helper()
	url := dbtest.NewDatabase(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	c := &catalogDB{t: t, url: url, name: conn.Config().Database, conn: conn}
	c.exec(`CREATE TABLE tenants (pos int PRIMARY KEY, name text, url text, active bool NOT NULL DEFAULT true)`)
	return c
}

func (c *catalogDB) exec(sql string, args ...any) {
	c.t.Helper()
	if _, err := c.conn.Exec(context.Background(), sql, args...); err != nil {
		c.t.Fatalf("%s: %v", sql, err)
	}
}

// parse loads a databases: section from YAML.
func parse(t *testing.T, yaml string) *config.Databases {
	t.Helper()
	cfg, err := config.Parse("c.yaml", []byte(yaml), config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Databases
}

const catalogSQL = `SELECT name, url FROM tenants WHERE active ORDER BY pos`

// names renders a list as name=url pairs.
func names(list []Database) string {
	parts := make([]string, len(list))
	for i, d := range list {
		parts[i] = d.Name + "=" + d.URL.Reveal()
	}
	return strings.Join(parts, " ")
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestListMergesStaticAndQuery checks the merge, the skipping of bad rows
// (reported by position, never with a url) and rows added and removed
// between calls.
func TestListMergesStaticAndQuery(t *testing.T) {
	t.Parallel()
	db := newCatalogDB(t)
	urlFile := filepath.Join(t.TempDir(), "catalog.url")
	writeFile(t, urlFile, db.url)
	db.exec(`INSERT INTO tenants (pos, name, url) VALUES
		(1, 'tenant-c', 'host=c password=pw-c'),
		(2, 'Bad Name', 'host=x password=pw-bad'),
		(3, 'tenant-d', NULL),
		(4, 'postgres://u:pw-swapped@h/db', 'tenant-e'),
		(5, 'tenant-a', 'host=shadow password=pw-shadow'),
		(6, NULL, 'host=n'),
		(7, 'tenant-c', 'host=c2'),
		(8, 'tenant-f', 'host=f password=pw-f')`)
	dbs := parse(t, `
databases:
  static:
    - {name: tenant-b, url: 'host=b'}
    - {name: tenant-a, url: 'host=a'}
  query: {url: '${file:`+urlFile+`}', sql: '`+catalogSQL+`'}
`)
	var logs testkit.Buffer
	c := New(dbs, slog.New(slog.NewTextHandler(&logs, nil)))
	defer c.Close()
	ctx := context.Background()

	list, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(list), "tenant-a=host=a tenant-b=host=b tenant-c=host=c password=pw-c tenant-f=host=f password=pw-f"; got != want {
		t.Fatalf("list = %s\nwant %s", got, want)
	}
	out := logs.String()
	for _, want := range []string{
		`invalid name`, `row=2 name="\"Bad Name\""`,
		`url is null or empty" row=3 database=tenant-d`,
		`row=4 name="(not shown: it may be a connection string)"`,
		`the static entry wins" database=tenant-a`,
		`name is null" row=6`,
		`already used by an earlier row" row=7 database=tenant-c first_row=1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	for _, secret := range []string{"pw-", db.url} {
		if strings.Contains(out, secret) {
			t.Errorf("log holds %q:\n%s", secret, out)
		}
	}

	// A persisting problem is logged once.
	if _, err := c.List(ctx); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "row=2 "); n != 1 {
		t.Errorf("the bad row was logged %d times over two calls", n)
	}

	// Rows added, removed, deactivated between calls.
	db.exec(`INSERT INTO tenants (pos, name, url) VALUES (9, 'tenant-g', 'host=g')`)
	db.exec(`DELETE FROM tenants WHERE name = 'tenant-c'`)
	db.exec(`UPDATE tenants SET active = false WHERE name = 'tenant-f'`)
	list, err = c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(list), "tenant-a=host=a tenant-b=host=b tenant-g=host=g"; got != want {
		t.Fatalf("after changes: %s\nwant %s", got, want)
	}

	// One catalog connection, kept open between calls, named.
	var n int
	if err := db.conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = $2`,
		db.name, ApplicationName).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("%d catalog connections, want 1", n)
	}
	c.Close()
	// List after Close reconnects.
	if list, err := c.List(ctx); err != nil || len(list) != 3 {
		t.Errorf("after Close: %v %v", names(list), err)
	}
}

// TestListKeepsLastKnownWhenCatalogDown checks that a catalog that cannot
// be reached leaves the last known list in force, returned with the error,
// and that the catalog is read again once it is back.
func TestListKeepsLastKnownWhenCatalogDown(t *testing.T) {
	t.Parallel()
	db := newCatalogDB(t)
	urlFile := filepath.Join(t.TempDir(), "catalog.url")
	writeFile(t, urlFile, db.url+"\n")
	db.exec(`INSERT INTO tenants (pos, name, url) VALUES (1, 'tenant-x', 'host=x'), (2, 'tenant-y', 'host=y')`)
	dbs := parse(t, `
databases:
  static: [{name: tenant-s, url: 'host=s'}]
  query: {url: '${file:`+urlFile+`}', sql: '`+catalogSQL+`'}
`)
	var logs testkit.Buffer
	c := New(dbs, slog.New(slog.NewTextHandler(&logs, nil)))
	defer c.Close()
	ctx := context.Background()
	list, err := c.List(ctx)
	if err != nil || names(list) != "tenant-s=host=s tenant-x=host=x tenant-y=host=y" {
		t.Fatalf("first list: %s %v", names(list), err)
	}

	// The catalog goes down: its connection is cut and new ones refused.
	admin, err := pgx.Connect(ctx, dbtest.ServerURL(t, "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	allow := func(on bool) {
		t.Helper()
		if _, err := admin.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %s WITH ALLOW_CONNECTIONS %t`, pgx.Identifier{db.name}.Sanitize(), on)); err != nil {
			t.Fatal(err)
		}
	}
	allow(false)
	defer allow(true) // before dbtest drops it
	db.exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND application_name = $2`, db.name, ApplicationName)
	db.exec(`INSERT INTO tenants (pos, name, url) VALUES (3, 'tenant-z', 'host=z')`)
	for range 2 {
		list, err = c.List(ctx)
		if err == nil {
			t.Fatal("List succeeded with the catalog down")
		}
		if got := names(list); got != "tenant-s=host=s tenant-x=host=x tenant-y=host=y" {
			t.Fatalf("list while down = %s, want the last known", got)
		}
		if !strings.Contains(err.Error(), "databases.query: ") || strings.Contains(err.Error(), db.url) {
			t.Errorf("error: %v", err)
		}
	}
	if !strings.Contains(logs.String(), "catalog query failed; keeping the last known list") || strings.Contains(logs.String(), db.url) {
		t.Errorf("log:\n%s", logs.String())
	}

	// Back: the next call reconnects and sees the new row.
	allow(true)
	list, err = c.List(ctx)
	if err != nil || names(list) != "tenant-s=host=s tenant-x=host=x tenant-y=host=y tenant-z=host=z" {
		t.Fatalf("after the catalog came back: %s %v", names(list), err)
	}

	// A failing query (the table dropped) also keeps the last known list.
	db.exec(`ALTER TABLE tenants RENAME TO tenants_old`)
	list, err = c.List(ctx)
	if err == nil || !strings.Contains(err.Error(), `relation "tenants" does not exist`) || len(list) != 4 {
		t.Fatalf("failing query: %s %v", names(list), err)
	}
}

// TestListRereadsFileURLs checks that a static url from a file follows the
// file, and that a file that disappears keeps the last url with an error
// naming the database, not the url.
func TestListRereadsFileURLs(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "tenant-b.url")
	writeFile(t, file, "host=b password=first\n")
	dbs := parse(t, "databases:\n  static:\n    - {name: tenant-b, url: '${file:"+file+"}'}\n")
	c := New(dbs, nil)
	defer c.Close()
	ctx := context.Background()
	list, err := c.List(ctx)
	if err != nil || names(list) != "tenant-b=host=b password=first" {
		t.Fatalf("first: %s %v", names(list), err)
	}
	writeFile(t, file, "host=b password=second\n")
	list, err = c.List(ctx)
	if err != nil || names(list) != "tenant-b=host=b password=second" {
		t.Fatalf("after the file changed: %s %v", names(list), err)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	list, err = c.List(ctx)
	if err == nil || names(list) != "tenant-b=host=b password=second" {
		t.Fatalf("file gone: %s %v", names(list), err)
	}
	if !strings.Contains(err.Error(), "databases tenant-b: url: cannot read ${file:") || strings.Contains(err.Error(), "second") {
		t.Errorf("error: %v", err)
	}
}

// TestConnectKeepsURLOutOfErrors checks Connect's errors.
func TestConnectKeepsURLOutOfErrors(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := Connect(ctx, "postgres://who:pw-secret@127.0.0.1:1/db?connect_timeout=5", "")
	if err == nil || strings.Contains(err.Error(), "pw-secret") || strings.Contains(err.Error(), "who") {
		t.Errorf("unreachable: %v", err)
	}
	_, err = Connect(ctx, "postgres://who:pw-secret@h:notaport/db", "")
	if err == nil || err.Error() != "cannot parse the database URL: invalid port" {
		t.Errorf("unparsable: %v", err)
	}
	url := dbtest.NewDatabase(t)
	conn, err := Connect(ctx, config.Secret(url), "drainer-test")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var name string
	if err := conn.QueryRow(ctx, `SELECT current_setting('application_name')`).Scan(&name); err != nil || name != "drainer-test" {
		t.Errorf("application_name = %q %v", name, err)
	}
}

// TestListSharedReportsQueryErrors: over a shared connection that sends
// statements without a prepare round trip (the fleet's coordination
// connection, QueryExecModeExec), the server's error comes with the rows,
// not from Query. A query naming a missing table or misspelt is reported
// with the server's error, not as a query returning 0 columns; a query
// that runs but returns one column is still reported as such.
func TestListSharedReportsQueryErrors(t *testing.T) {
	t.Parallel()
	db := newCatalogDB(t)
	pc, err := pgxpool.ParseConfig(db.url)
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 1
	pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	urlFile := filepath.Join(t.TempDir(), "catalog.url")
	writeFile(t, urlFile, db.url+"\n")
	for _, tc := range []struct{ sql, want string }{
		{"SELECT name, url FROM no_such_tenants", `relation "no_such_tenants" does not exist`},
		{"SELEC name, url FROM tenants", `syntax error at or near "SELEC"`},
		{"SELECT name FROM tenants", "the query returns 1 columns; it must return two: name and url"},
	} {
		dbs := parse(t, `
databases:
  query: {url: '${file:`+urlFile+`}', sql: '`+tc.sql+`'}
`)
		c := NewShared(dbs, pool, nil)
		_, err := c.List(context.Background())
		if err == nil || !strings.Contains(err.Error(), "databases.query: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one holding %q", tc.sql, err, tc.want)
		}
	}
}
