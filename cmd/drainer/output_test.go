package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/drainer-io/drainer/migrations"
	"github.com/drainer-io/drainer/producer"
	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestMain serves every test of the package that needs a database. Run
// with runAsDrainer set, the test binary is the drainer command itself
// (drainerCommand), its arguments the command's.
func TestMain(m *testing.M) {
	if os.Getenv(runAsDrainer) == "1" {
		main()
		return
	}
	dbtest.Main(m)
}

// runAsDrainer names the variable that makes the test binary run as the
// drainer command.
const runAsDrainer = "DRAINER_TEST_RUN_AS_DRAINER"

// drainerCommand is the drainer command as a process of its own, with
// args: this test binary, run as it (TestMain). A build of the binary took
// its test 100 s on an empty build cache.
func drainerCommand(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), runAsDrainer+"=1")
	return cmd
}

// opsDB is a migrated test database for the operator commands.
type opsDB struct {
	t    *testing.T
	url  string
	pool *pgxpool.Pool
}

func newOpsDB(t *testing.T) *opsDB {
	t.Helper()
	url := dbtest.NewDatabase(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Migrate(ctx, conn, migrations.DefaultSchema, nil); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &opsDB{t: t, url: url, pool: pool}
}

// enqueue records steps s0… of run for tool and returns their keys.
func (d *opsDB) enqueue(run, tool string, n int) []string {
	d.t.Helper()
	var keys []string
	err := pgx.BeginFunc(context.Background(), d.pool, func(tx pgx.Tx) error {
		for i := range n {
			in := producer.Intent{Payload: []byte(fmt.Sprintf(`{"amount":%d}`, i))}
			in.AgentRunID, in.StepID, in.ToolName = run, fmt.Sprintf("s%d", i), tool
			k, _, err := producer.EnqueueTx(context.Background(), tx, in)
			if err != nil {
				return err
			}
			keys = append(keys, k)
		}
		return nil
	})
	if err != nil {
		d.t.Fatal(err)
	}
	return keys
}

func (d *opsDB) exec(sql string, args ...any) {
	d.t.Helper()
	if _, err := d.pool.Exec(context.Background(), sql, args...); err != nil {
		d.t.Fatalf("%s: %v", sql, err)
	}
}

// set moves a row to status with attempts, as the daemon would.
func (d *opsDB) set(key, status string, attempts int) {
	d.t.Helper()
	d.exec(`UPDATE drainer.outbox SET status = $2, attempts = $3, updated_at = now() WHERE key = $1`, key, status, attempts)
}

func (d *opsDB) status(key string) string {
	d.t.Helper()
	var s string
	if err := d.pool.QueryRow(context.Background(), `SELECT status FROM drainer.outbox WHERE key = $1`, key).Scan(&s); err != nil {
		d.t.Fatal(err)
	}
	return s
}

// run executes the CLI with --database-url (after the command words) and
// returns its exit code, stdout and stderr.
func (d *opsDB) run(args ...string) (int, string, string) {
	d.t.Helper()
	var out, errb bytes.Buffer
	code := execute(append(args, "--database-url", d.url), &out, &errb)
	return code, out.String(), errb.String()
}

// want checks an exit code and that stderr contains every fragment.
func want(t *testing.T, code int, stderr string, wantCode int, fragments ...string) {
	t.Helper()
	if code != wantCode {
		t.Fatalf("exit %d, want %d; stderr: %s", code, wantCode, stderr)
	}
	for _, f := range fragments {
		if !strings.Contains(stderr, f) {
			t.Errorf("stderr %q lacks %q", stderr, f)
		}
	}
}

// decode parses out as JSON into v.
func decode(t *testing.T, out string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
}

// checkAligned checks that every line of a table starts each column of the
// header line at the same character position.
func checkAligned(t *testing.T, table string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
	header := []rune(lines[0])
	var starts []int
	for i, r := range header {
		if r != ' ' && (i == 0 || header[i-1] == ' ') {
			starts = append(starts, i)
		}
	}
	if len(starts) < 2 {
		t.Fatalf("no columns in header %q", lines[0])
	}
	for _, line := range lines[1:] {
		rs := []rune(line)
		for _, s := range starts {
			if s >= len(rs) || rs[s] == ' ' || (s > 0 && rs[s-1] != ' ') {
				t.Fatalf("column at %d not aligned in\n%s\n%s", s, lines[0], line)
			}
		}
	}
}

func TestTruncAndCell(t *testing.T) {
	t.Parallel()
	if got := trunc("abcdef", 4); got != "abc…" || utf8.RuneCountInString(got) != 4 {
		t.Errorf("trunc = %q", got)
	}
	if got := trunc("abc", 4); got != "abc" {
		t.Errorf("trunc = %q", got)
	}
	if got := cell("a\nb\tc"); got != "a b c" {
		t.Errorf("cell = %q", got)
	}
	if got := cell(""); got != "-" {
		t.Errorf("cell = %q", got)
	}
	for in, want := range map[string]string{"90m": "1h30m0s", "7d": "168h0m0s", "36h": "36h0m0s"} {
		if d, err := parseAge(in); err != nil || d.String() != want {
			t.Errorf("parseAge(%q) = %v, %v", in, d, err)
		}
	}
	if _, err := parseAge("soon"); err == nil {
		t.Error("parseAge accepted soon")
	}
}

// TestDatabaseSettingsFromTheEnvironmentNameIt: a database URL or schema
// that cannot be used is a usage error naming the variable it came from,
// never echoing the URL.
func TestDatabaseSettingsFromTheEnvironmentNameIt(t *testing.T) {
	t.Setenv("DRAINER_DATABASE_URL", "postgres://u:pw-secret@h:99999/x")
	for _, args := range [][]string{{"list"}, {"migrate"}, {"run", "--config", "testdata/none.yaml"}} {
		var out, errb bytes.Buffer
		code := execute(args, &out, &errb)
		if code != exitUsage || !strings.Contains(errb.String(), "DRAINER_DATABASE_URL: cannot parse the database URL: invalid port") || strings.Contains(errb.String(), "pw-secret") {
			t.Errorf("%v: exit %d, stderr %q; want 2, naming DRAINER_DATABASE_URL, without the URL", args, code, errb.String())
		}
	}
	t.Setenv("DRAINER_DATABASE_URL", "postgres://x")
	t.Setenv("DRAINER_SCHEMA", "Bad-Name")
	var out, errb bytes.Buffer
	if code := execute([]string{"list"}, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), `DRAINER_SCHEMA: invalid schema name "Bad-Name"`) {
		t.Errorf("list with DRAINER_SCHEMA: exit %d, stderr %q", code, errb.String())
	}
}

func TestOperatorUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"list", "--database-url", "postgres://x", "--status", "bogus"}, "pending, in_flight, succeeded, failed, outcome_unknown, compensated, compensation_failed, cancelled"},
		{[]string{"list", "--database-url", "postgres://x", "--output", "yaml"}, `--output: "yaml" is not table or json`},
		{[]string{"list", "--database-url", "postgres://x", "--limit", "0"}, "--limit"},
		{[]string{"list", "--database-url", "postgres://x", "--older-than", "soon"}, "--older-than"},
		{[]string{"list"}, "no database URL"},
		{[]string{"list", "--database-url", "postgres://x", "--schema", "Bad-Name"}, `--schema: invalid schema name "Bad-Name"`},
		{[]string{"list", "--database-url", "postgres://u:pw@h:99999/x"}, "--database-url: cannot parse the database URL: invalid port"},
		{[]string{"migrate", "--database-url", "postgres://u:pw%zz@h/x"}, "--database-url: cannot parse the database URL: failed to parse as URL (invalid percent-encoded token in password)"},
		{[]string{"list", "--database-url", "postgres://x", "--run", ""}, "--run: must not be empty (leave it out to match every row)"},
		{[]string{"requeue", "--database-url", "postgres://x", "--status", "failed", "--tool", " "}, "--tool: must not be empty"},
		{[]string{"cancel", "--database-url", "postgres://x", "--run", ""}, "--run: must not be empty"},
		{[]string{"inspect", "--database-url", "postgres://x"}, "accepts 1 arg"},
		{[]string{"requeue", "--database-url", "postgres://x"}, "give a KEY, or --status"},
		{[]string{"requeue", "k", "--database-url", "postgres://x", "--status", "failed"}, "either KEY or filter flags"},
		{[]string{"requeue", "--database-url", "postgres://x", "--status", "succeeded"}, "would repeat it"},
		{[]string{"requeue", "--database-url", "postgres://x", "--bogus"}, "unknown flag"},
		{[]string{"cancel", "--database-url", "postgres://x"}, "--run R"},
		{[]string{"cancel", "--database-url", "postgres://x", "--run", "r", "--status", "failed"}, "cancel takes pending rows"},
		{[]string{"resolve", "k", "--database-url", "postgres://x"}, "--note is required"},
		{[]string{"resolve", "k", "--database-url", "postgres://x", "--note", "n", "--outcome", "maybe"}, "--outcome"},
		{[]string{"abort", "r", "--database-url", "postgres://x"}, "--reason is required"},
		{[]string{"pause", "x", "--adapter", "a", "--database-url", "postgres://x"}, "not both"},
		{[]string{"resume", "--database-url", "postgres://x"}, "give the ROUTE"},
		{[]string{"audit", "verify", "--database-url", "postgres://x", "--limit", "0"}, "--limit"},
		{[]string{"audit"}, "needs a subcommand"},
	} {
		var out, errb bytes.Buffer
		code := execute(tc.args, &out, &errb)
		if code != exitUsage || !strings.Contains(errb.String(), tc.msg) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errb.String(), tc.msg)
		}
	}
}

// TestActorWithoutUSER: an operator action run where $USER is unset (a
// container, `kubectl exec`, cron) records the name of the process's OS
// user, just the name, else the host name (docs/reference.md §3), never
// "unknown" nor user@host; --actor and $USER still come first.
func TestActorWithoutUSER(t *testing.T) {
	t.Setenv("USER", "")
	wantName := func() string {
		if u, err := user.Current(); err == nil && u.Username != "" {
			return u.Username
		}
		host, _ := os.Hostname()
		return host
	}()
	if got := (&opFlags{}).who("r").Actor; got != wantName || strings.Contains(got, "@") {
		t.Fatalf("actor without $USER = %q; want the OS user's name %q", got, wantName)
	}
	found := func(name string) func() (string, error) { return func() (string, error) { return name, nil } }
	lost := func() (string, error) { return "", errors.New("unknown userid 4242") }
	if got := actorFrom("", found("root"), found("vm")); got != "root" {
		t.Fatalf("actor from the OS user root on host vm = %q; want root", got)
	}
	if got := actorFrom(" ", lost, found("vm")); got != "vm" {
		t.Fatalf("actor with no OS user name on host vm = %q; want vm", got)
	}
	if got := actorFrom("", found(""), found("vm")); got != "vm" {
		t.Fatalf("actor with an empty OS user name on host vm = %q; want vm", got)
	}
	if got := actorFrom("alice", found("root"), found("vm")); got != "alice" {
		t.Fatalf("actor with USER=alice = %q", got)
	}
	t.Setenv("USER", "alice")
	if got := (&opFlags{}).who("r").Actor; got != "alice" {
		t.Fatalf("actor with USER=alice = %q", got)
	}
	if got := (&opFlags{actor: " bob "}).who("r").Actor; got != "bob" {
		t.Fatalf("actor with --actor bob = %q", got)
	}
}
