package migrations_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// TestConcurrentMigrate runs migrate from several connections at once, as N
// replicas starting together do, then again: every run succeeds and the
// schema ends at the latest version exactly once.
func TestConcurrentMigrate(t *testing.T) {
	t.Parallel()
	url := dbtest.NewDatabase(t)
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := pgx.Connect(context.Background(), url)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close(context.Background())
			_, err = migrations.Migrate(context.Background(), conn, "drainer", nil)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent migrate: %v", err)
		}
	}
	conn := connect(t, url)
	n, err := migrations.Migrate(context.Background(), conn, "drainer", nil)
	if err != nil || n != 0 {
		t.Fatalf("second migrate applied %d (err %v), want 0", n, err)
	}
	v, err := migrations.Check(context.Background(), conn, "drainer")
	if err != nil || v != migrations.Latest() {
		t.Fatalf("check: version %d err %v, want %d", v, err, migrations.Latest())
	}
}

func TestCheckUnmigratedAndTooNew(t *testing.T) {
	t.Parallel()
	url := dbtest.NewDatabase(t)
	conn := connect(t, url)
	ctx := context.Background()
	_, err := migrations.Check(ctx, conn, "drainer")
	if err == nil || !strings.Contains(err.Error(), "drainer migrate") {
		t.Fatalf("unmigrated schema: %v", err)
	}
	if _, err := migrations.Migrate(ctx, conn, "other_schema", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "UPDATE other_schema.schema_meta SET value = '999' WHERE name = 'min_daemon_schema_version'"); err != nil {
		t.Fatal(err)
	}
	_, err = migrations.Check(ctx, conn, "other_schema")
	if err == nil || !strings.Contains(err.Error(), "upgrade drainer") || !strings.Contains(err.Error(), "999") ||
		!errors.Is(err, migrations.ErrDaemonTooOld) || !errors.Is(err, migrations.ErrSchemaNotReady) {
		t.Fatalf("schema needing a newer daemon: %v", err)
	}
	if _, err := conn.Exec(ctx, "UPDATE other_schema.schema_meta SET value = '1' WHERE name = 'min_daemon_schema_version'"); err != nil {
		t.Fatal(err)
	}
	// Tables migrated, functions and triggers of an older revision (a
	// migrate under way between its two transactions, or one that failed).
	if _, err := conn.Exec(ctx, "UPDATE other_schema.schema_meta SET value = '0' WHERE name = 'code_revision'"); err != nil {
		t.Fatal(err)
	}
	_, err = migrations.Check(ctx, conn, "other_schema")
	if err == nil || !errors.Is(err, migrations.ErrSchemaNotReady) || !strings.Contains(err.Error(), "code revision 0") {
		t.Fatalf("schema whose functions are not installed: %v", err)
	}
	if err := migrations.ValidateSchema("Bad-Name"); err == nil {
		t.Fatal("invalid schema name accepted")
	}
}

// TestSQLKeyVectors checks the SQL key function against every shared vector.
func TestSQLKeyVectors(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "idemkey", "testdata", "key-vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Vectors []struct {
			AgentRunID    string `json:"agent_run_id"`
			StepID        string `json:"step_id"`
			ToolName      string `json:"tool_name"`
			BusinessScope string `json:"business_scope"`
			Canonical     string `json:"canonical"`
			Key           string `json:"key"`
		}
	}
	if err := json.Unmarshal(raw, &f); err != nil || len(f.Vectors) == 0 {
		t.Fatalf("vectors: %v", err)
	}
	url := dbtest.NewDatabase(t)
	conn := connect(t, url)
	ctx := context.Background()
	if _, err := migrations.Migrate(ctx, conn, "drainer", nil); err != nil {
		t.Fatal(err)
	}
	for _, v := range f.Vectors {
		var canonical, key string
		err := conn.QueryRow(ctx, "SELECT drainer.canonical_tuple($1,$2,$3,$4), drainer.idempotency_key($1,$2,$3,$4)",
			v.AgentRunID, v.StepID, v.ToolName, v.BusinessScope).Scan(&canonical, &key)
		if err != nil {
			t.Fatalf("vector %q: %v", v.AgentRunID, err)
		}
		if canonical != v.Canonical {
			t.Errorf("SQL canonical(%q):\n got %s\nwant %s", v.AgentRunID, canonical, v.Canonical)
		}
		if key != v.Key {
			t.Errorf("SQL key(%q) = %s, want %s", v.AgentRunID, key, v.Key)
		}
	}
	// enqueue and enqueue_batch compute the key inline, without
	// idempotency_key: they must give the same bytes. (A vector with an
	// empty step or tool cannot be enqueued: the tuple check refuses it.)
	var runs, steps, tools, scopes, payloads, want []string
	for _, v := range f.Vectors {
		if v.AgentRunID == "" || v.StepID == "" || v.ToolName == "" {
			continue
		}
		var key string
		if err := conn.QueryRow(ctx, "SELECT key FROM drainer.enqueue($1,$2,$3,$4,'{}')",
			v.AgentRunID, v.StepID, v.ToolName, v.BusinessScope).Scan(&key); err != nil {
			t.Fatalf("enqueue vector %q: %v", v.AgentRunID, err)
		}
		if key != v.Key {
			t.Errorf("enqueue key(%q) = %s, want %s", v.AgentRunID, key, v.Key)
		}
		runs, steps, tools, scopes = append(runs, v.AgentRunID), append(steps, v.StepID), append(tools, v.ToolName), append(scopes, v.BusinessScope)
		payloads, want = append(payloads, "{}"), append(want, v.Key)
	}
	if len(want) < 5 {
		t.Fatalf("only %d vectors can be enqueued", len(want))
	}
	rows, err := conn.Query(ctx, "SELECT key FROM drainer.enqueue_batch($1,$2,$3,$4,$5::text[]::jsonb[]) ORDER BY ord",
		runs, steps, tools, scopes, payloads)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("enqueue_batch keys:\n got %v\nwant %v", got, want)
	}
}

// TestMigrateReportVersion: MigrateReport reports the schema's version
// afterwards: this release's once migrated, with what it applied, and a
// newer release's as it is, nothing applied (MigrateWith said 0 applied
// and nothing of the version, so `drainer migrate` printed this release's).
func TestMigrateReportVersion(t *testing.T) {
	t.Parallel()
	conn := connect(t, dbtest.NewDatabase(t))
	ctx := context.Background()
	latest := migrations.Latest()
	opts := migrations.DefaultOptions(nil)
	r, err := migrations.MigrateReport(ctx, conn, migrations.DefaultSchema, opts)
	if err != nil || r.Version != latest || r.Applied != latest || r.Newer() {
		t.Fatalf("first migrate: %+v %v, want version and applied %d", r, err, latest)
	}
	if r, err = migrations.MigrateReport(ctx, conn, migrations.DefaultSchema, opts); err != nil || r.Version != latest || r.Applied != 0 {
		t.Fatalf("second migrate: %+v %v, want version %d, 0 applied", r, err, latest)
	}
	if _, err := conn.Exec(ctx, "UPDATE drainer.schema_version SET version = $1", latest+2); err != nil {
		t.Fatal(err)
	}
	r, err = migrations.MigrateReport(ctx, conn, migrations.DefaultSchema, opts)
	if err != nil || r.Version != latest+2 || r.Applied != 0 || !r.Newer() {
		t.Fatalf("migrate on a newer schema: %+v %v, want version %d, 0 applied, newer", r, err, latest+2)
	}
}
