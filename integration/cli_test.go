//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/producer"
	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// lineOf returns the 1-based number of the first line of file containing
// marker.
func lineOf(t *testing.T, file, marker string) int {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, marker) {
			return i + 1
		}
	}
	t.Fatalf("%s has no line containing %q", file, marker)
	return 0
}

// configCase is a malformed config of testdata/config and what
// `drainer check` must say about it.
type configCase struct {
	file   string // under testdata/config
	marker string // text on the offending line
	field  string // field path in the message ("" for a YAML syntax error)
	msg    string // part of the message
}

var badConfigs = []configCase{
	{"unknown_field.yaml", "colour:", "adapters.provider.colour", "unknown field"},
	{"bad_duration.yaml", "timeout: 5 seconds", "adapters.provider.timeout", `invalid duration "5 seconds"`},
	{"wrong_type.yaml", "workers: many", "workers", "must be an integer"},
	{"missing_adapter.yaml", "adapter: nowhere", "routes.charge_card.adapter", `unknown adapter "nowhere"`},
	{"lease_too_short.yaml", "lease: 8s", "lease", "must exceed the timeout of adapter provider"},
	{"yaml_syntax.yaml", "backoff:", "", "invalid YAML"},
	{"unknown_adapter_type.yaml", "type: carrier-pigeon", "adapters.provider.type", `unknown adapter type "carrier-pigeon"`},
}

func TestCheckConfig(t *testing.T) {
	t.Parallel()
	for _, c := range badConfigs {
		t.Run(strings.TrimSuffix(c.file, ".yaml"), func(t *testing.T) {
			t.Parallel()
			path := filepath.Join("testdata", "config", c.file)
			res := runCLI(t, nil, "check", "--config", path)
			if res.code != 2 {
				t.Fatalf("drainer check %s: %s; want exit 2", c.file, res)
			}
			where := fmt.Sprintf("%s:%d:", path, lineOf(t, path, c.marker))
			want := where
			if c.field != "" {
				want += fmt.Sprintf("%s: ", c.field)
			}
			// The column sits between LINE: and the field.
			if !containsLocated(res.stderr, where, c.field) || !strings.Contains(res.stderr, c.msg) {
				t.Errorf("stderr does not name %q (FILE:LINE[:COL]: field) with %q:\n%s", want, c.msg, res.stderr)
			}
		})
	}

	t.Run("valid", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join("testdata", "config", "valid.yaml")
		res := runCLI(t, nil, "check", "--config", path)
		if res.code != 0 || !strings.Contains(res.stdout, "ok") {
			t.Fatalf("drainer check valid.yaml: %s; want exit 0 and ok", res)
		}
		// The flag's environment variable works as well.
		res = runCLI(t, []string{"DRAINER_CONFIG=" + path}, "check")
		if res.code != 0 {
			t.Fatalf("DRAINER_CONFIG=%s drainer check: %s; want exit 0", path, res)
		}
	})

	t.Run("every_error_at_once", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join("testdata", "config", "many_errors.yaml")
		res := runCLI(t, nil, "check", "--config", path)
		if res.code != 2 {
			t.Fatalf("drainer check many_errors.yaml: %s; want exit 2", res)
		}
		for _, e := range []struct{ marker, field string }{
			{"workers: many", "workers"},
			{"timeout: 5 seconds", "adapters.provider.timeout"},
			{"adapter: nowhere", "routes.charge_card.adapter"},
			{"retries: 3", "routes.charge_card.retries"},
		} {
			where := fmt.Sprintf("%s:%d:", path, lineOf(t, path, e.marker))
			if !containsLocated(res.stderr, where, e.field) {
				t.Errorf("stderr does not list %s %s:\n%s", where, e.field, res.stderr)
			}
		}
	})

	t.Run("run_refuses_bad_config", func(t *testing.T) {
		t.Parallel()
		for _, c := range badConfigs {
			path := filepath.Join("testdata", "config", c.file)
			res := runCLI(t, nil, "run", "--config", path, "--metrics-addr", "127.0.0.1:0",
				"--database-url", "postgres://drainer@127.0.0.1:9/none?connect_timeout=1")
			where := fmt.Sprintf("%s:%d:", path, lineOf(t, path, c.marker))
			if res.code != 2 || !containsLocated(res.stderr, where, c.field) {
				t.Errorf("drainer run --config %s: %s; want exit 2 naming %s %s", c.file, res, where, c.field)
			}
		}
	})
}

// containsLocated reports whether s holds a line with where (FILE:LINE:)
// followed, after an optional column, by field.
func containsLocated(s, where, field string) bool {
	for _, line := range strings.Split(s, "\n") {
		i := strings.Index(line, where)
		if i < 0 {
			continue
		}
		rest := line[i+len(where):]
		if col, after, ok := strings.Cut(rest, ":"); ok {
			if _, err := strconv.Atoi(col); err == nil {
				rest = after
			}
		}
		rest = strings.TrimLeft(rest, " ")
		if field == "" || strings.HasPrefix(rest, field+":") {
			return true
		}
	}
	return false
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join("testdata", "config", "valid.yaml")
	for _, c := range []struct {
		name string
		env  []string
		args []string
		code int
		want string // in stderr, or stdout for exit 0
	}{
		{"run_without_config", nil, []string{"run", "--database-url", "postgres://x@127.0.0.1:9/x"}, 2, "--config is required"},
		{"unknown_flag", nil, []string{"run", "--config", cfg, "--bogus"}, 2, "unknown flag: --bogus"},
		{"unknown_command", nil, []string{"frobnicate"}, 2, "unknown command"},
		{"bad_env_value", []string{"DRAINER_WORKERS=lots"}, []string{"run", "--config", cfg, "--database-url", "postgres://x@127.0.0.1:9/x"}, 2, "DRAINER_WORKERS"},
		{"migrate_without_database_url", nil, []string{"migrate"}, 2, "database URL"},
		{"version", nil, []string{"version"}, 0, "drainer "},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			res := runCLI(t, c.env, c.args...)
			out := res.stderr
			if c.code == 0 {
				out = res.stdout
			}
			if res.code != c.code || !strings.Contains(out, c.want) {
				t.Errorf("drainer %s: %s\nwant exit %d and %q", strings.Join(c.args, " "), res, c.code, c.want)
			}
		})
	}
}

func TestEnqueueCLI(t *testing.T) {
	t.Parallel()
	dbURL, pool := newMigratedDB(t)
	enqueue := func(run, step, tool, scope, payload string) cliResult {
		args := []string{"enqueue", "--database-url", dbURL, "--run", run, "--step", step, "--tool", tool, "--payload", payload}
		if scope != "" {
			args = append(args, "--scope", scope)
		}
		return runCLI(t, nil, args...)
	}

	t.Run("invalid_json_payload", func(t *testing.T) {
		res := enqueue("run-1", "s1", "charge_card", "", `{"amount": 12`)
		if res.code != 2 || !strings.Contains(res.stderr, "payload is not valid JSON") {
			t.Errorf("%s\nwant exit 2 naming the invalid JSON payload", res)
		}
	})
	t.Run("empty_run", func(t *testing.T) {
		res := enqueue("", "s1", "charge_card", "", `{}`)
		if res.code != 2 || !strings.Contains(res.stderr, "agent_run_id must not be empty") {
			t.Errorf("%s\nwant exit 2 naming agent_run_id", res)
		}
	})
	t.Run("step_too_long", func(t *testing.T) {
		step := strings.Repeat("s", idemkey.MaxFieldBytes+1)
		res := enqueue("run-1", step, "charge_card", "", `{}`)
		if res.code != 2 || !strings.Contains(res.stderr, "step_id is 1025 bytes, more than the limit of 1024") {
			t.Errorf("%s\nwant exit 2 naming step_id and the 1024-byte limit", res)
		}
		// Through the environment variable as well.
		res = runCLI(t, []string{"DRAINER_STEP=" + step}, "enqueue", "--database-url", dbURL,
			"--run", "run-1", "--tool", "charge_card", "--payload", `{}`)
		if res.code != 2 || !strings.Contains(res.stderr, "step_id is 1025 bytes") {
			t.Errorf("DRAINER_STEP of 1025 bytes: %s\nwant exit 2 naming step_id", res)
		}
		// The SQL function enforces the same limit for producers in other languages.
		_, err := pool.Exec(context.Background(), `SELECT * FROM drainer.enqueue('run-1', $1, 'charge_card', '', '{}'::jsonb)`, step)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" || !strings.Contains(pgErr.Message, "step_id is 1025 bytes, more than the limit of 1024") {
			t.Errorf("drainer.enqueue with a 1025-byte step_id: %v; want SQLSTATE 22023 naming step_id and the limit", err)
		}
	})
	t.Run("invalid_utf8_step", func(t *testing.T) {
		res := enqueue("run-1", "s\xff1", "charge_card", "", `{}`)
		if res.code != 2 || !strings.Contains(res.stderr, "step_id is not valid UTF-8") {
			t.Errorf("%s\nwant exit 2 naming step_id as invalid UTF-8", res)
		}
	})
	t.Run("nul_in_field_go_producer", func(t *testing.T) {
		// exec arguments cannot hold NUL and Postgres text cannot either, so
		// the Go producer must refuse it before the database.
		ctx := context.Background()
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, _, err := producer.EnqueueTx(ctx, tx, producer.Intent{
				Tuple:   idemkey.Tuple{AgentRunID: "run-1", StepID: "s\x001", ToolName: "charge_card"},
				Payload: []byte(`{}`),
			})
			return err
		})
		if err == nil || !strings.Contains(err.Error(), "step_id contains a NUL byte") {
			t.Errorf("EnqueueTx with a NUL in step_id: %v; want an error naming step_id and the NUL", err)
		}
	})
	t.Run("same_tuple_twice", func(t *testing.T) {
		first := enqueue("run-2", "s1", "charge_card", "acct-9", `{"amount": 1}`)
		second := enqueue("run-2", "s1", "charge_card", "acct-9", `{"amount": 1}`)
		want := idemkey.Tuple{AgentRunID: "run-2", StepID: "s1", ToolName: "charge_card", BusinessScope: "acct-9"}.Key()
		if first.code != 0 || strings.TrimSpace(first.stdout) != want+" created" {
			t.Errorf("first enqueue: %s\nwant %q", first, want+" created")
		}
		if second.code != 0 || strings.TrimSpace(second.stdout) != want+" existing" {
			t.Errorf("second enqueue: %s\nwant %q", second, want+" existing")
		}
		// Different payload: exit 1 naming the key.
		third := enqueue("run-2", "s1", "charge_card", "acct-9", `{"amount": 2}`)
		if third.code != 1 || !strings.Contains(third.stderr, want) {
			t.Errorf("same tuple, different payload: %s\nwant exit 1 naming key %s", third, want)
		}
		var n int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM drainer.outbox WHERE agent_run_id = 'run-2'`).Scan(&n); err != nil || n != 1 {
			t.Errorf("rows for run-2: %d (%v), want 1", n, err)
		}
	})
	t.Run("payload_over_limit", func(t *testing.T) {
		db := pgx.Identifier{databaseName(t, dbURL)}.Sanitize()
		if _, err := pool.Exec(context.Background(), "ALTER DATABASE "+db+" SET drainer.max_payload_bytes = 1000"); err != nil {
			t.Fatal(err)
		}
		payload := fmt.Sprintf(`{"blob": %q}`, strings.Repeat("x", 2000))
		res := enqueue("run-3", "s1", "charge_card", "", payload)
		if res.code != 1 || !strings.Contains(res.stderr, "more than the limit of 1000") {
			t.Errorf("%s\nwant exit 1 naming the 1000-byte limit", res)
		}
		if res := enqueue("run-3", "s2", "charge_card", "", `{"small": true}`); res.code != 0 {
			t.Errorf("a payload under the limit: %s", res)
		}
	})
}

// TestProviderGarbage answers 200 with bodies that are not storable JSON:
// rows still succeed with a bounded {"body": ...} response and the daemon
// keeps running.
func TestProviderGarbage(t *testing.T) {
	t.Parallel()
	dbURL, pool := newMigratedDB(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tool := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
		switch tool {
		case "garbage":
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte("<html>Internal thing happened</html> definitely not JSON"))
		case "huge":
			w.Header().Set("Content-Type", "application/json")
			chunk := []byte(strings.Repeat("x", 64<<10))
			for range (5 << 20) / len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return // the client stopped reading
				}
			}
		case "bad_utf8":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte("{\"name\": \"caf\xe9 \xff\xfe\", \"ok\": true}"))
		case "nul_escape":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"name": "a\u0000b"}`))
		default:
			http.Error(w, "unknown tool", http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)

	tools := []string{"garbage", "huge", "bad_utf8", "nul_escape"}
	cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", httpConfig(srv.URL, "", tools...))
	d := startDaemon(t, "drainer", "--config", cfgPath, "--database-url", dbURL, "--shutdown-timeout", "5s")

	keys := map[string]string{}
	for _, tool := range tools {
		keys[tool] = enqueueOne(t, pool, idemkey.Tuple{AgentRunID: "run-g", StepID: tool, ToolName: tool}, `{}`)
	}
	for _, tool := range tools {
		key := keys[tool]
		waitRowStatus(t, d, pool, key, "succeeded", 30*time.Second)
		var isObject, bodyIsString bool
		var size, status int
		err := pool.QueryRow(context.Background(), `SELECT jsonb_typeof(response) = 'object',
			       coalesce(jsonb_typeof(response->'body') = 'string', false),
			       octet_length(response::text), response_status
			  FROM drainer.outbox WHERE key = $1`, key).Scan(&isObject, &bodyIsString, &size, &status)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: response of %d bytes, status %d", tool, size, status)
		if !isObject || !bodyIsString {
			t.Errorf("%s: response is not {\"body\": <text>}: %v", tool, strOrNil(readRow(t, pool, key).Response))
		}
		if size >= 1<<20 {
			t.Errorf("%s: stored response is %d bytes, want well under 1 MiB", tool, size)
		}
		if status != http.StatusOK {
			t.Errorf("%s: response_status %d, want 200", tool, status)
		}
	}
	d.requireRunning()
	if code, body := d.get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %s", code, body)
	}
	d.signal(syscall.SIGTERM)
	if code := d.exitCode(15 * time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
}

// TestDatabaseUnreachable starts the daemon against a port nobody listens
// on: it stays up, says so, answers /healthz but not /readyz, and stops
// cleanly on SIGTERM. migrate fails with exit 1.
func TestDatabaseUnreachable(t *testing.T) {
	t.Parallel()
	port := strconv.Itoa(freePort(t)) // closed again: nothing listens there
	dbURL := "postgres://drainer@127.0.0.1:" + port + "/drainer?sslmode=disable&connect_timeout=2"
	cfg := filepath.Join("testdata", "config", "valid.yaml")

	d := startDaemon(t, "drainer", "--config", cfg, "--database-url", dbURL, "--shutdown-timeout", "5s")
	testkit.WaitFor(t, 20*time.Second, "the daemon to report the database unreachable", func() (bool, string) {
		d.requireRunning()
		out := d.stderr.String()
		return strings.Contains(out, "database unreachable"), tail(out, 1000)
	})
	out := d.stderr.String()
	if !strings.Contains(out, "127.0.0.1") || !strings.Contains(out, "port="+port) {
		t.Errorf("the unreachable-database log does not name host 127.0.0.1 and port %s:\n%s", port, tail(out, 2000))
	}
	testkit.WaitFor(t, 10*time.Second, "/healthz 200", func() (bool, string) {
		code, body := d.get("/healthz")
		return code == http.StatusOK, fmt.Sprintf("%d %s", code, body)
	})
	if code, body := d.get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz with the database unreachable: %d %s; want 503", code, body)
	}
	d.requireRunning()
	sentAt := time.Now()
	d.signal(syscall.SIGTERM)
	if code := d.exitCode(10 * time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	t.Logf("exited %s after SIGTERM", time.Since(sentAt).Round(time.Millisecond))

	res := runCLI(t, nil, "migrate", "--database-url", dbURL)
	if res.code != 1 || !strings.Contains(res.stderr, "connect") || !strings.Contains(res.stderr, port) {
		t.Errorf("drainer migrate against an unreachable database: %s\nwant exit 1 with a connect error naming port %s", res, port)
	}
}

// TestCheckUnsetEnvIsWarning: check needs no secrets (an unset ${env:X} is a
// warning), run refuses the same config (exit 2).
func TestCheckUnsetEnvIsWarning(t *testing.T) {
	t.Parallel()
	cfg := strings.Replace(httpConfig("http://127.0.0.1:9", "", "charge_card"),
		"    timeout: 5s\n", "    timeout: 5s\n    headers: {Authorization: \"Bearer ${env:INTEGRATION_UNSET_TOKEN}\"}\n", 1)
	path := writeFile(t, t.TempDir(), "drainer.yaml", cfg)
	where := fmt.Sprintf("%s:%d:", path, lineOf(t, path, "INTEGRATION_UNSET_TOKEN"))

	res := runCLI(t, nil, "check", "--config", path)
	if res.code != 0 || !strings.Contains(res.stderr, "warning") || !containsLocated(res.stderr, where, "adapters.provider.headers.Authorization") {
		t.Errorf("drainer check with an unset ${env:X}: %s\nwant exit 0 and a warning at %s", res, where)
	}
	res = runCLI(t, nil, "run", "--config", path, "--metrics-addr", "127.0.0.1:0",
		"--database-url", "postgres://drainer@127.0.0.1:9/none?connect_timeout=1")
	if res.code != 2 || !containsLocated(res.stderr, where, "adapters.provider.headers.Authorization") {
		t.Errorf("drainer run with an unset ${env:X}: %s\nwant exit 2 naming %s", res, where)
	}
	if strings.Contains(res.stderr, "Bearer ") {
		t.Errorf("the error shows the header value:\n%s", res.stderr)
	}
}

// TestMigrateConcurrentAndIdempotent runs migrate from three processes at
// once on a fresh database, then once more.
func TestMigrateConcurrentAndIdempotent(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewDatabase(t)
	results := make(chan cliResult, 3)
	for range 3 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, drainerBin, "migrate", "--database-url", dbURL)
			cmd.Env = childEnv()
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			if ee, ok := errors.AsType[*exec.ExitError](err); ok {
				code = ee.ExitCode()
			} else if err != nil {
				code = -1
			}
			results <- cliResult{stdout: stdout.String(), stderr: stderr.String(), code: code}
		}()
	}
	// Each migration is applied by exactly one of them. (Their stdout's
	// "(N applied)" is not checked: every process reports the count it saw
	// pending before waiting for the lock.)
	applying := 0
	for range 3 {
		res := <-results
		if res.code != 0 {
			t.Errorf("concurrent drainer migrate: %s", res)
		}
		applying += strings.Count(res.stderr, "applying migration")
	}
	if latest := schemaVersion(t); applying != latest {
		t.Errorf("the three processes applied %d migrations in all, want each of the %d exactly once", applying, latest)
	}
	res := runCLI(t, nil, "migrate", "--database-url", dbURL)
	if res.code != 0 || !strings.Contains(res.stdout, "(0 applied)") {
		t.Errorf("second drainer migrate: %s\nwant exit 0 with nothing applied", res)
	}
}

// TestRunWaitsForSchema starts the daemon on a database not migrated yet: it
// waits (not ready) and starts draining once migrate has run.
func TestRunWaitsForSchema(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewDatabase(t)
	cfg := filepath.Join("testdata", "config", "valid.yaml")
	d := startDaemon(t, "drainer", "--config", cfg, "--database-url", dbURL, "--shutdown-timeout", "5s")
	testkit.WaitFor(t, 20*time.Second, "the daemon to report the schema missing", func() (bool, string) {
		d.requireRunning()
		out := d.stderr.String()
		return strings.Contains(out, "schema not ready"), tail(out, 1000)
	})
	if code, body := d.get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before migrate: %d %s; want 503", code, body)
	}
	if res := runCLI(t, nil, "migrate", "--database-url", dbURL); res.code != 0 {
		t.Fatalf("drainer migrate: %s", res)
	}
	d.waitReady(30 * time.Second)
	d.signal(syscall.SIGTERM)
	if code := d.exitCode(15 * time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
}

// schemaVersion returns the schema version `drainer version` reports.
func schemaVersion(t *testing.T) int {
	t.Helper()
	res := runCLI(t, nil, "version")
	_, after, ok := strings.Cut(res.stdout, "schema version ")
	if !ok {
		t.Fatalf("drainer version: %s", res)
	}
	var n int
	if _, err := fmt.Sscanf(after, "%d", &n); err != nil {
		t.Fatalf("drainer version: %s: %v", res, err)
	}
	return n
}
