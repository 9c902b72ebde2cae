//go:build integration

package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/tooling/mockprovider"
	"github.com/jackc/pgx/v5/pgxpool"
)

// sdkSuiteWait bounds one run of a producer library's own test suite
// (Python's unittest, TypeScript's npm test).
const sdkSuiteWait = 30 * time.Minute

// pySDKDir is the Python producer library, relative to this package.
const pySDKDir = "../sdk/python"

// pyInterpreter is the Python the library is built and tested with: Debian's,
// which has python3-psycopg (installed by `make python-deps`).
const pyInterpreter = "/usr/bin/python3"

// pySchema is the schema the Python tests run in: not the default one, so
// that the library's schema keyword is exercised end to end.
const pySchema = "py_sdk"

// TestPythonSDK runs the unit, database and end-to-end tests of
// drainer_client (`python3 -m unittest discover -s sdk/python/tests`)
// against a database migrated into schema py_sdk and a `drainer run` on it
// that dispatches the tools those tests use to the mock provider. It fails
// if a test fails, if any test was skipped, or if none ran.
func TestPythonSDK(t *testing.T) {
	t.Parallel()
	dir := pyRequireInterpreter(t)

	dbURL, pool := newMigratedDB(t)
	if res := runCLI(t, nil, "migrate", "--database-url", dbURL, "--schema", pySchema); res.code != 0 {
		t.Fatalf("drainer migrate --schema %s: %s", pySchema, res)
	}

	// The provider of py_charge_card and py_send_email (200 with the
	// payload echoed) and py_refused (always 422).
	provider := mockprovider.New(mockprovider.Config{
		VerifyTuple:   true,
		TerminalTools: map[string]int{"py_refused": 422},
	})
	baseURL, err := provider.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(provider.Close)
	// The provider of py_unsure, a non_idempotent tool: always 503, so its
	// row parks as outcome_unknown.
	unsure := mockprovider.New(mockprovider.Config{Fail503: 1, VerifyTuple: true, Seed: 11})
	unsureURL, err := unsure.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unsure.Close)

	cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", pyConfig(baseURL, unsureURL))
	if res := runCLI(t, nil, "check", "--config", cfgPath); res.code != 0 {
		t.Fatalf("drainer check: %s", res)
	}
	d := startDaemon(t, "drainer-run", "--config", cfgPath, "--database-url", dbURL, "--schema", pySchema)
	d.waitReady(30 * time.Second)

	// A bound for a suite that never ends, not a judgement of its speed:
	// under the load of three `make test` at once on two cores it took
	// more than 10 minutes.
	out, code := pyRun(t, dir, sdkSuiteWait, []string{
		"DRAINER_TEST_DATABASE_URL=" + dbURL,
		"DRAINER_TEST_SCHEMA=" + pySchema,
		"DRAINER_TEST_DAEMON=1",
	}, "-m", "unittest", "discover", "-s", "tests", "-v")
	report := func() string { return "output:\n" + tail(out, 30000) }
	if code != 0 {
		t.Fatalf("python3 -m unittest in %s exited %d\n%s", dir, code, report())
	}
	sum, err := pyParseSummary(out)
	if err != nil {
		t.Fatalf("python3 -m unittest: %v\n%s", err, report())
	}
	if testing.Verbose() {
		t.Logf("unittest results:\n%s", strings.Join(pyResultLines(out), "\n"))
	}
	t.Logf("python3 -m unittest: ran %d tests, %d skipped", sum.ran, sum.skipped)
	switch {
	case sum.ran == 0:
		t.Fatalf("python3 -m unittest ran no test\n%s", report())
	case sum.skipped > 0 || len(pySkipLines(out)) > 0:
		t.Fatalf("python3 -m unittest skipped tests; every test must run here:\n%s\n%s",
			strings.Join(pySkipLines(out), "\n"), report())
	case !sum.ok:
		t.Fatalf("python3 -m unittest did not report OK\n%s", report())
	}

	// The tests worked in their schema, never in the default one, and what
	// the daemon sent carried keys and tuples the provider could verify.
	if n := pyCountRows(t, pool, pySchema); n == 0 {
		t.Errorf("no row in %s.outbox: the tests did not use DRAINER_TEST_SCHEMA", pySchema)
	}
	if n := pyCountRows(t, pool, "drainer"); n != 0 {
		t.Errorf("%d rows in drainer.outbox: a test ignored DRAINER_TEST_SCHEMA", n)
	}
	for name, p := range map[string]*mockprovider.Provider{"provider": provider, "unsure": unsure} {
		snap := p.Snapshot()
		if snap.BadRequests != 0 {
			t.Errorf("%s answered %d bad requests (missing or mismatched key/tuple headers)", name, snap.BadRequests)
		}
		if snap.Requests == 0 {
			t.Errorf("%s received no request: the end-to-end tests did not reach it", name)
		}
	}
	if dups := provider.DuplicateEffects(); len(dups) != 0 {
		t.Errorf("duplicate effects for keys %v", dups)
	}
	d.requireRunning()
}

// pyConfig routes the tools of sdk/python/tests/test_e2e.py; py_unrouted,
// used by test_db.py for rows that must stay pending, deliberately has no route.
func pyConfig(baseURL, unsureURL string) string {
	return fmt.Sprintf(`workers: 4
lease: 15s
unrouted_recheck: 1s
adapters:
  provider:
    type: http
    url: %s/{tool_name}
    timeout: 5s
  unsure:
    type: http
    url: %s/{tool_name}
    timeout: 5s
routes:
  py_charge_card:
    adapter: provider
    class: key_idempotent
    max_attempts: 20
    backoff: {base: 50ms, cap: 500ms}
  py_send_email:
    adapter: provider
    class: key_idempotent
    max_attempts: 20
    backoff: {base: 50ms, cap: 500ms}
  py_refused:
    adapter: provider
    max_attempts: 3
    backoff: {base: 50ms, cap: 500ms}
  py_unsure:
    adapter: unsure
    class: non_idempotent
    max_attempts: 3
    backoff: {base: 50ms, cap: 500ms}
`, baseURL, unsureURL)
}

// pyRequireInterpreter returns the absolute path of sdk/python once it has
// checked that /usr/bin/python3 can import what the library and its tests
// need. It fails (never skips) when it cannot: `make python-deps` installs
// Debian's python3-psycopg, python3-pip, python3-setuptools, python3-wheel,
// and for the SQLAlchemy tests python3-sqlalchemy (1.4 on Debian 12) with
// its psycopg2 and asyncpg drivers and greenlet.
func pyRequireInterpreter(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(pySDKDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "pyproject.toml")); err != nil {
		t.Fatalf("%s has no pyproject.toml: %v", dir, err)
	}
	if _, err := os.Stat(pyInterpreter); err != nil {
		t.Fatalf("%s not found (%v): install Debian's python3 and run `make python-deps`", pyInterpreter, err)
	}
	out, code := pyRun(t, dir, time.Minute, nil, "-c",
		"import warnings; warnings.simplefilter('ignore'); import psycopg, setuptools, wheel, pip, venv, sqlalchemy, psycopg2, asyncpg, greenlet; print(psycopg.__version__)")
	if code != 0 {
		t.Fatalf("%s cannot import psycopg, setuptools, wheel, pip, venv, sqlalchemy, psycopg2, asyncpg and greenlet: "+
			"run `make python-deps` (installs python3-psycopg python3-pip python3-setuptools python3-wheel python3-venv "+
			"python3-sqlalchemy python3-psycopg2 python3-asyncpg python3-greenlet)\n%s", pyInterpreter, tail(out, 4000))
	}
	t.Logf("%s with psycopg %s", pyInterpreter, strings.TrimSpace(out))
	return dir
}

// pyRun runs /usr/bin/python3 with args in dir, with the test's environment
// minus DRAINER_* and PYTHON* variables plus env, and returns its combined
// output and exit code.
func pyRun(t *testing.T, dir string, timeout time.Duration, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, pyInterpreter, args...)
	cmd.Dir = dir
	var base []string
	for _, kv := range childEnv() {
		if !strings.HasPrefix(kv, "PYTHON") {
			base = append(base, kv)
		}
	}
	cmd.Env = append(base, append([]string{
		"PYTHONPATH=" + filepath.Join(dir, "src"),
		"PYTHONDONTWRITEBYTECODE=1",
		"PYTHONUNBUFFERED=1",
	}, env...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case ctx.Err() != nil:
		t.Fatalf("%s %s in %s did not finish within %v\n%s", pyInterpreter, strings.Join(args, " "), dir, timeout, tail(out.String(), 8000))
	case errors.As(err, &ee) && ee.Exited():
		return out.String(), ee.ExitCode()
	default:
		t.Fatalf("%s %s in %s: %v\n%s", pyInterpreter, strings.Join(args, " "), dir, err, tail(out.String(), 4000))
	}
	return out.String(), -1
}

// pySummary is what the last lines of a unittest run say.
type pySummary struct {
	ran, skipped int
	ok           bool
}

var (
	pyRanLine    = regexp.MustCompile(`(?m)^Ran (\d+) tests? in [0-9.]+s\s*$`)
	pyResultLine = regexp.MustCompile(`(?m)^(OK|FAILED)(?: \(([^)]*)\))?\s*$`)
	pySkipCount  = regexp.MustCompile(`\bskipped=(\d+)`)
)

// pyParseSummary reads "Ran N tests in Xs" and the "OK (skipped=K)" or
// "FAILED (...)" line of unittest's output, and errors when either is missing.
func pyParseSummary(out string) (pySummary, error) {
	var s pySummary
	ran := pyRanLine.FindAllStringSubmatch(out, -1)
	if len(ran) == 0 {
		return s, errors.New(`no "Ran N tests" line in the output: not unittest's summary`)
	}
	n, err := strconv.Atoi(ran[len(ran)-1][1])
	if err != nil {
		return s, err
	}
	s.ran = n
	res := pyResultLine.FindAllStringSubmatch(out, -1)
	if len(res) == 0 {
		return s, errors.New("no OK or FAILED line in the output: not unittest's summary")
	}
	last := res[len(res)-1]
	s.ok = last[1] == "OK"
	if m := pySkipCount.FindStringSubmatch(last[2]); m != nil {
		s.skipped, _ = strconv.Atoi(m[1])
	}
	return s, nil
}

// pyResultLines returns the verbose per-test lines ("test_x (mod.Class.test_x) ... ok").
func pyResultLines(out string) []string {
	var lines []string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, " ... ") {
			lines = append(lines, line)
		}
	}
	return lines
}

// pySkipLines returns the verbose lines of skipped tests and classes
// ("... skipped 'reason'"), which also catches a skip the summary would miss.
func pySkipLines(out string) []string {
	var skips []string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, " ... skipped") || strings.HasPrefix(line, "skipped ") {
			skips = append(skips, line)
		}
	}
	return skips
}

// pyCountRows counts the rows of schema's outbox.
func pyCountRows(t *testing.T, pool *pgxpool.Pool, schema string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+schema+".outbox").Scan(&n); err != nil {
		t.Fatalf("count %s.outbox: %v", schema, err)
	}
	return n
}

// TestPythonSDKSummary checks how TestPythonSDK reads unittest's output:
// counts, skips of tests and of whole classes, failures, and output without
// a summary.
func TestPythonSDKSummary(t *testing.T) {
	t.Parallel()
	passed := "test_a (test_key.T.test_a) ... ok\ntest_b (test_key.T.test_b) ... ok\n\n" +
		"----------------------------------------------------------------------\nRan 2 tests in 0.004s\n\nOK\n"
	s, err := pyParseSummary(passed)
	if err != nil || s.ran != 2 || s.skipped != 0 || !s.ok {
		t.Errorf("passed run = %+v, %v", s, err)
	}
	if got := pyResultLines(passed); len(got) != 2 {
		t.Errorf("result lines = %q", got)
	}
	skipped := "test_a (test_db.T.test_a) ... skipped 'set DRAINER_TEST_DATABASE_URL'\n" +
		"setUpClass (test_e2e.E) ... skipped 'set DRAINER_TEST_DAEMON=1'\n" +
		"test_b (test_key.T.test_b) ... ok\n\nRan 2 tests in 0.010s\n\nOK (skipped=1)\n"
	s, err = pyParseSummary(skipped)
	if err != nil || s.ran != 2 || s.skipped != 1 || !s.ok {
		t.Errorf("skipped run = %+v, %v", s, err)
	}
	if got := pySkipLines(skipped); len(got) != 2 {
		t.Errorf("skip lines = %q, want the skipped test and the skipped class", got)
	}
	failed := "Ran 3 tests in 1.0s\n\nFAILED (failures=1, errors=1, skipped=2)\n"
	if s, err := pyParseSummary(failed); err != nil || s.ok || s.skipped != 2 || s.ran != 3 {
		t.Errorf("failed run = %+v, %v", s, err)
	}
	if s, err := pyParseSummary("Ran 0 tests in 0.000s\n\nNO TESTS RAN\n"); err == nil && s.ok {
		t.Errorf("a run of no test was read as OK: %+v", s)
	}
	if _, err := pyParseSummary("Traceback (most recent call last):\nImportError: psycopg\n"); err == nil {
		t.Error("output without a summary accepted")
	}
}
