package daemon

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/tooling/pgtemp"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestWarnNoVacuum: a daemon starting on a server whose autovacuum is off,
// or on a schema one of whose tables has it off, says so, naming what to
// change; with autovacuum on everywhere it says nothing.
func TestWarnNoVacuum(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c, err := pgtemp.Start(ctx, pgtemp.Options{Settings: map[string]string{"autovacuum": "off"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	pool, err := pgxpool.New(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = migrations.Migrate(ctx, conn.Conn(), migrations.DefaultSchema, nil)
	conn.Release()
	if err != nil {
		t.Fatal(err)
	}
	warned := func() string {
		var logs testkit.Buffer
		warnNoVacuum(context.Background(), pool, migrations.DefaultSchema, slog.New(slog.NewTextHandler(&logs, nil)))
		return logs.String()
	}
	if got := warned(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "autovacuum is off on this server") {
		t.Errorf("autovacuum off: logged %q, want a warning", got)
	}
	exec := func(sql string) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	exec(`ALTER SYSTEM SET autovacuum = on`)
	exec(`SELECT pg_reload_conf()`)
	testkit.WaitFor(t, time.Minute, "the server's autovacuum on after the reload", func() (bool, string) {
		got := warned()
		return got == "", got
	})
	exec(`ALTER TABLE drainer.intents SET (autovacuum_enabled = false)`)
	if got := warned(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "tables=intents") {
		t.Errorf("autovacuum off for intents: logged %q, want a warning naming it", got)
	}
}
