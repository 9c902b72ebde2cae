package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/jackc/pgx/v5"
)

// runCLI executes the CLI with args and returns its exit code, stdout and
// stderr.
func runCLI(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := execute(args, &out, &errb)
	return code, out.String(), errb.String()
}

// writeTemp writes a file under dir and returns its path.
func writeTemp(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// unreachableURL refuses connections at once (port 1 of the loopback).
const unreachableURL = "host=127.0.0.1 port=1 user=nobody dbname=gone connect_timeout=5"

// TestMigrateAll migrates three databases, one of them unreachable: the two
// others reach the latest version, each database gets one line naming it
// (and no url), and the command exits 1.
func TestMigrateAll(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	urlA, urlB := dbtest.NewDatabase(t), dbtest.NewDatabase(t)
	ctx := context.Background()
	// The catalog lives in tenant-a's database and lists tenant-b.
	conn, err := pgx.Connect(ctx, urlA)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE tenants AS SELECT 'tenant-b' AS name, $1::text AS url`, urlB); err != nil {
		t.Fatal(err)
	}
	fileA := writeTemp(t, dir, "a.url", urlA+"\n")
	cfg := writeTemp(t, dir, "drainer.yaml", `
databases:
  static:
    - {name: tenant-a, url: "${file:`+fileA+`}"}
    - {name: tenant-c, url: "`+unreachableURL+`"}
  query:
    url: "${file:`+fileA+`}"
    sql: SELECT name, url FROM tenants
`)
	code, out, errb := runCLI("migrate", "--all", "--config", cfg, "--parallel", "2")
	want(t, code, errb, 1, "migrate --all: 1 of 3 databases failed (tenant-c)")
	latest := migrations.Latest()
	for _, line := range []string{
		"tenant-a: version 0 → " + itoa(latest) + " (" + itoa(latest) + " applied)",
		"tenant-b: version 0 → " + itoa(latest) + " (" + itoa(latest) + " applied)",
		"tenant-c: error: connect: ",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("output lacks %q:\n%s", line, out)
		}
	}
	if n := strings.Count(out, "\n"); n != 3 {
		t.Errorf("%d lines, want one per database:\n%s", n, out)
	}
	for _, u := range []string{urlA, urlB, "nobody", "dbname"} {
		if strings.Contains(out+errb, u) {
			t.Errorf("output or stderr holds a url part %q:\n%s\n%s", u, out, errb)
		}
	}
	for _, u := range []string{urlA, urlB} {
		c, err := pgx.Connect(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		v, err := migrations.Check(ctx, c, migrations.DefaultSchema)
		c.Close(ctx)
		if err != nil || v != latest {
			t.Errorf("after migrate --all: version %d, %v", v, err)
		}
	}

	// Without the unreachable one: exit 0, up to date.
	cfg2 := writeTemp(t, dir, "ok.yaml", "databases:\n  static:\n    - {name: tenant-a, url: \"${file:"+fileA+"}\"}\n")
	code, out, errb = runCLI("migrate", "--all", "--config", cfg2)
	want(t, code, errb, 0)
	if !strings.Contains(out, "tenant-a: version "+itoa(latest)+" (up to date)") || !strings.Contains(out, "1 databases migrated") {
		t.Errorf("second run:\n%s", out)
	}

	// DRAINER_DATABASE_URL, set for the other commands, is left aside by
	// --all (it refused to run, blaming --database-url).
	sub := drainerCommand(ctx, "migrate", "--all", "--config", cfg2)
	sub.Env = append(sub.Env, "DRAINER_DATABASE_URL="+urlB)
	if b, err := sub.CombinedOutput(); err != nil || !strings.Contains(string(b), "tenant-a: version "+itoa(latest)+" (up to date)") {
		t.Errorf("migrate --all with DRAINER_DATABASE_URL set: %v\n%s", err, b)
	}

	// Usage errors.
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"migrate", "--all"}, "--all needs --config FILE"},
		{[]string{"migrate", "--config", cfg2}, "give --all to migrate every database"},
		{[]string{"migrate", "--all", "--config", cfg2, "--database", "tenant-a"}, "leave out --database and --database-url"},
		{[]string{"migrate", "--all", "--config", cfg2, "--parallel", "0"}, "--parallel: must be between 1 and 64, got 0"},
		{[]string{"migrate", "--all", "--config", writeTemp(t, dir, "none.yaml", "workers: 2\n")}, "none.yaml has no databases: section"},
		{[]string{"migrate", "--all", "--config", writeTemp(t, dir, "bad.yaml", "databases: {static: [{name: A}]}\n")}, `databases.static[0].name: invalid database name "A"`},
	} {
		code, _, errb := runCLI(tc.args...)
		want(t, code, errb, 2, tc.msg)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestDatabaseFlag runs operator commands on a database named with
// --database NAME and --config FILE: a static entry and a catalog row; an
// unknown name is a usage error listing the known names.
func TestDatabaseFlag(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t)
	k := d.enqueue("run-db", "charge_card", 1)
	catalogURL := dbtest.NewDatabase(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, catalogURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE tenants AS SELECT 'from-catalog' AS name, $1::text AS url`, d.url); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := writeTemp(t, dir, "a.url", d.url)
	catFile := writeTemp(t, dir, "catalog.url", catalogURL)
	cfg := writeTemp(t, dir, "drainer.yaml", `
databases:
  static:
    - {name: tenant-a, url: "${file:`+file+`}"}
    - {name: tenant-b, url: "${env:DRAINER_TEST_UNSET_TENANT_B}"}
  query: {url: "${file:`+catFile+`}", sql: "SELECT name, url FROM tenants"}
adapters:
  payments: {type: http, url: "http://p/{tool_name}", headers: {Authorization: "Bearer ${env:DRAINER_TEST_UNSET_TOKEN}"}}
routes:
  charge_card: {adapter: payments}
`)
	// A static entry: other entries' and adapters' secrets need not be set.
	code, out, errb := runCLI("list", "--database", "tenant-a", "--config", cfg, "--output", "json")
	want(t, code, errb, 0)
	if !strings.Contains(out, k[0]) {
		t.Errorf("list --database tenant-a:\n%s", out)
	}
	// A catalog row.
	code, out, errb = runCLI("inspect", k[0], "--database", "from-catalog", "--config", cfg)
	want(t, code, errb, 0)
	if !strings.Contains(out, "rows of run run-db") {
		t.Errorf("inspect --database from-catalog:\n%s", out)
	}
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"list", "--database", "tenant-x", "--config", cfg}, 2,
			`--database tenant-x: unknown database (did you mean "tenant-a"?); known databases: from-catalog, tenant-a, tenant-b`},
		{[]string{"inspect", k[0], "--database", "tenant-b", "--config", cfg}, 2,
			"databases tenant-b: url: environment variable DRAINER_TEST_UNSET_TENANT_B is not set"},
		{[]string{"list", "--database", "tenant-a"}, 2, "--database tenant-a needs --config FILE"},
		{[]string{"list", "--database", "tenant-a", "--config", cfg, "--database-url", d.url}, 2,
			"--database and --database-url are exclusive"},
		{[]string{"list", "--config", cfg}, 2, "give --database NAME too"},
		{[]string{"list", "--database", "tenant-a", "--config", filepath.Join(dir, "missing.yaml")}, 2, "cannot read config file"},
	} {
		code, _, errb := runCLI(tc.args...)
		want(t, code, errb, tc.code, tc.msg)
		if strings.Contains(errb, d.url) || strings.Contains(errb, catalogURL) {
			t.Errorf("stderr holds a url: %s", errb)
		}
	}
}

// TestRequireDB checks the resolution of --database without a database
// server: static entries only.
func TestRequireDB(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := writeTemp(t, dir, "a.url", "postgres://u:pw@h/a\n")
	cfg := writeTemp(t, dir, "c.yaml", "databases:\n  static:\n    - {name: a, url: '${file:"+file+"}'}\n    - {name: b, url: 'host=b'}\n")
	ctx := context.Background()

	g := &globals{database: "a", configPath: cfg, schema: "drainer"}
	if err := g.requireDB(ctx); err != nil || g.databaseURL != "postgres://u:pw@h/a" {
		t.Fatalf("a: %v", err)
	}
	// Resolved once: the file changing afterwards does not matter.
	writeTemp(t, dir, "a.url", "postgres://u:pw@h/changed")
	if err := g.requireDB(ctx); err != nil || g.databaseURL != "postgres://u:pw@h/a" {
		t.Fatalf("a again: %v", err)
	}
	g = &globals{database: "b", configPath: cfg, schema: "drainer"}
	if err := g.requireDB(ctx); err != nil || g.databaseURL != "host=b" {
		t.Fatalf("b: %v", err)
	}
	g = &globals{database: "c", configPath: cfg, schema: "drainer"}
	err := g.requireDB(ctx)
	if _, ok := err.(usageError); !ok || err.Error() != "--database c: unknown database; known databases: a, b" {
		t.Fatalf("c: %T %v", err, err)
	}
	g = &globals{database: "a", configPath: cfg, schema: "Bad"}
	if _, ok := g.requireDB(ctx).(usageError); !ok {
		t.Fatal("bad schema is not a usage error")
	}
	g = &globals{schema: "drainer"}
	if err := g.requireDB(ctx); err == nil || !strings.Contains(err.Error(), "no database URL") {
		t.Fatalf("nothing: %v", err)
	}
	// A mistyped scheme is named, with the one meant; the URL (and its
	// password) is not repeated.
	g = &globals{databaseURL: "postgress://u:secret@h/a", schema: "drainer"}
	err = g.requireDB(ctx)
	if _, ok := err.(usageError); !ok || err.Error() != `--database-url: the database URL's scheme is "postgress": did you mean postgres://?` {
		t.Fatalf("postgress://: %T %v", err, err)
	}
}

// TestDatabaseFlagEnvironment checks that --database on the command line
// makes DRAINER_DATABASE_URL ignored (and --database-url, DRAINER_DATABASE).
func TestDatabaseFlagEnvironment(t *testing.T) {
	dir := t.TempDir()
	cfg := writeTemp(t, dir, "c.yaml", "databases:\n  static: [{name: a, url: '"+unreachableURL+"'}]\n")
	t.Setenv("DRAINER_DATABASE_URL", "host=elsewhere")
	t.Setenv("DRAINER_DATABASE", "a")
	// --database given: DRAINER_DATABASE_URL ignored, the entry's url used
	// (unreachable: a connect error, exit 1, not a usage error).
	code, _, errb := runCLI("list", "--database", "a", "--config", cfg)
	want(t, code, errb, 1, "connect")
	// --database-url given: DRAINER_DATABASE ignored.
	code, _, errb = runCLI("list", "--database-url", unreachableURL)
	want(t, code, errb, 1, "connect")
	// Both from the environment: refused.
	code, _, errb = runCLI("list", "--config", cfg)
	want(t, code, errb, 2, "--database and --database-url are exclusive")
}

// TestCheckDatabases checks that `drainer check` reports the problems of
// databases: and accepts a good section with its references unset.
func TestCheckDatabases(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := writeTemp(t, dir, "good.yaml", `
databases:
  static:
    - {name: tenant-a, url: "${env:DRAINER_TEST_UNSET_A}"}
  query: {url: "${file:/nonexistent/catalog.url}", sql: "SELECT name, url FROM tenants"}
  refresh: 1m
`)
	code, out, errb := runCLI("check", "--config", good)
	want(t, code, errb, 0, "warning: "+good+":4:29: databases.static[0].url: environment variable DRAINER_TEST_UNSET_A is not set")
	if !strings.Contains(out, "databases: 1 static + catalog (refresh 1m)") {
		t.Errorf("summary: %s", out)
	}
	bad := writeTemp(t, dir, "bad.yaml", `
database_url: "host=x"
databases:
  static:
    - {name: tenant-a, url: "host=a"}
    - {name: tenant-a}
  query: {url: "postgres://u:inline@c/c"}
  refresh: 0s
`)
	code, _, errb = runCLI("check", "--config", bad)
	want(t, code, errb, 2,
		bad+":2:1: database_url: database_url and databases are exclusive",
		bad+`:6:14: databases.static[1].name: database name "tenant-a" is already used (line 5)`,
		bad+":6:7: databases.static[1].url: required field is missing",
		bad+":7:16: databases.query.url: secret values must come from",
		bad+":7:3: databases.query.sql: required field is missing",
		bad+`:8:12: databases.refresh: must be positive, got "0s"`)
}

// TestErrorsNameTheDatabase: with --database NAME, an error names the
// database it came from, and a connection that fails names neither the
// URL's user nor its database name ("names, never urls").
func TestErrorsNameTheDatabase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d := newOpsDB(t)
	fileA := writeTemp(t, dir, "a.url", d.url+"\n")
	cfg := writeTemp(t, dir, "drainer.yaml", `
databases:
  static:
    - {name: tenant-a, url: "${file:`+fileA+`}"}
    - {name: tenant-dead, url: "`+unreachableURL+`"}
`)
	code, _, errb := runCLI("resolve", "idem_v1_00000000000000000000000000000000", "--note", "x", "--actor", "alice",
		"--database", "tenant-a", "--config", cfg)
	want(t, code, errb, 1, "database tenant-a: ", "no row with key idem_v1_00000000000000000000000000000000")
	code, _, errb = runCLI("list", "--database", "tenant-dead", "--config", cfg)
	want(t, code, errb, 1, "database tenant-dead: connect: ")
	for _, leak := range []string{"user=", "database=", "nobody"} {
		if strings.Contains(errb, leak) {
			t.Errorf("the connect error shows %q: %s", leak, errb)
		}
	}
}
