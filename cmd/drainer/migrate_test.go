package main

import (
	"context"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/jackc/pgx/v5"
)

// TestMigrateNewerSchema: `drainer migrate` on a schema a newer release
// migrated prints the schema's own version, says that it is newer than
// this release's and that nothing was applied, and exits 0 (`drainer run`
// works on it); when its schema_meta asks for a newer daemon, it also says
// that this release's `drainer run` refuses it. `migrate --all` says the
// same per database.
func TestMigrateNewerSchema(t *testing.T) {
	t.Parallel()
	url := dbtest.NewDatabase(t)
	latest := migrations.Latest()
	code, out, errb := runCLI("migrate", "--database-url", url)
	want(t, code, errb, 0)
	if line := "schema drainer at version " + itoa(latest) + " (" + itoa(latest) + " applied)"; !strings.Contains(out, line) {
		t.Fatalf("first migrate: output lacks %q:\n%s", line, out)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	newer := latest + 2
	if _, err := conn.Exec(ctx, "UPDATE drainer.schema_version SET version = $1", newer); err != nil {
		t.Fatal(err)
	}
	code, out, errb = runCLI("migrate", "--database-url", url)
	want(t, code, errb, 0)
	line := "schema drainer at version " + itoa(newer) + ", newer than this release's " + itoa(latest) + "; nothing applied\n"
	if out != line {
		t.Errorf("migrate on a newer schema printed %q, want %q", out, line)
	}

	cfg := writeTemp(t, t.TempDir(), "drainer.yaml", "databases:\n  static:\n    - {name: tenant-a, url: \""+url+"\"}\n")
	code, out, errb = runCLI("migrate", "--all", "--config", cfg)
	want(t, code, errb, 0)
	if line := "tenant-a: version " + itoa(newer) + ", newer than this release's " + itoa(latest) + "; nothing applied\n"; !strings.Contains(out, line) {
		t.Errorf("migrate --all on a newer schema: output lacks %q:\n%s", line, out)
	}

	if _, err := conn.Exec(ctx, "UPDATE drainer.schema_meta SET value = $1 WHERE name = 'min_daemon_schema_version'", itoa(newer)); err != nil {
		t.Fatal(err)
	}
	code, out, errb = runCLI("migrate", "--database-url", url)
	want(t, code, errb, 0)
	if !strings.HasPrefix(out, strings.TrimSuffix(line, "\n")+"; this release's drainer run refuses it: ") || !strings.Contains(out, "upgrade drainer") {
		t.Errorf("migrate on a schema needing a newer daemon printed %q", out)
	}
}

// TestCommandsReadPoolSettings: the url `drainer run` takes, with its
// pool's settings (pool_max_conns, as docs/reference.md suggests), serves
// migrate and the operator commands too: the settings are the pool's, not
// parameters sent to the server (which refused the connection, naming
// pool_max_conns).
func TestCommandsReadPoolSettings(t *testing.T) {
	t.Parallel()
	url := dbtest.NewDatabase(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	url += sep + "pool_max_conns=8&pool_max_conn_idle_time=1m"
	code, _, errb := runCLI("migrate", "--database-url", url)
	want(t, code, errb, 0)
	code, out, errb := runCLI("list", "--database-url", url)
	want(t, code, errb, 0)
	if strings.TrimSpace(out) != "no rows match" {
		t.Errorf("list: %q", out)
	}
	code, _, errb = runCLI("stats", "--database-url", url)
	want(t, code, errb, 0)
}
