//go:build integration

package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/tooling/mockprovider"
	"github.com/jackc/pgx/v5/pgxpool"
)

// tsSDKDir is the TypeScript producer library, relative to this package.
const tsSDKDir = "../sdk/typescript"

// tsSchema is the schema the TypeScript tests run in: not the default one,
// so that the library's schema option is exercised end to end.
const tsSchema = "ts_sdk"

// TestTypeScriptSDK runs the tests of @drainer/client (`npm test` in
// sdk/typescript) against a database migrated into schema ts_sdk and a
// `drainer run` on it that dispatches the tools those tests use to the mock
// provider. It fails if npm test fails, if any test was skipped, or if none ran.
func TestTypeScriptSDK(t *testing.T) {
	t.Parallel()
	dir := tsPrepareSDK(t)

	dbURL, pool := newMigratedDB(t)
	if res := runCLI(t, nil, "migrate", "--database-url", dbURL, "--schema", tsSchema); res.code != 0 {
		t.Fatalf("drainer migrate --schema %s: %s", tsSchema, res)
	}

	// The provider of ts_charge_card and ts_send_email (200 with the payload
	// echoed) and ts_refused (always 422).
	provider := mockprovider.New(mockprovider.Config{
		VerifyTuple:   true,
		TerminalTools: map[string]int{"ts_refused": 422},
	})
	baseURL, err := provider.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(provider.Close)
	// The provider of ts_unsure, a non_idempotent tool: always 503, so its
	// row parks as outcome_unknown.
	unsure := mockprovider.New(mockprovider.Config{Fail503: 1, VerifyTuple: true, Seed: 7})
	unsureURL, err := unsure.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unsure.Close)

	cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", tsConfig(baseURL, unsureURL))
	if res := runCLI(t, nil, "check", "--config", cfgPath); res.code != 0 {
		t.Fatalf("drainer check: %s", res)
	}
	d := startDaemon(t, "drainer-run", "--config", cfgPath, "--database-url", dbURL, "--schema", tsSchema)
	d.waitReady(30 * time.Second)

	// A bound for a suite that never ends, not a judgement of its speed:
	// under the load of three `make test` at once on two cores it took
	// more than 10 minutes.
	stdout, stderr, code := tsRunNPM(t, dir, sdkSuiteWait,
		[]string{
			"DRAINER_TEST_DATABASE_URL=" + dbURL,
			"DRAINER_TEST_SCHEMA=" + tsSchema,
			"DRAINER_TEST_DAEMON=1",
		}, "test")
	report := func() string {
		return fmt.Sprintf("stdout:\n%s\nstderr:\n%s", tail(stdout, 20000), tail(stderr, 4000))
	}
	if code != 0 {
		t.Fatalf("npm test in %s exited %d\n%s", dir, code, report())
	}
	sum, err := tsParseSummary(stdout)
	if err != nil {
		t.Fatalf("npm test: %v\n%s", err, report())
	}
	if testing.Verbose() {
		t.Logf("npm test results:\n%s", strings.Join(tsResultLines(stdout), "\n"))
	}
	t.Logf("npm test: %d tests, %d passed, %d failed, %d skipped, %d todo, %d cancelled",
		sum["tests"], sum["pass"], sum["fail"], sum["skipped"], sum["todo"], sum["cancelled"])
	switch {
	case sum["tests"] == 0:
		t.Fatalf("npm test ran no test\n%s", report())
	case sum["skipped"] > 0:
		t.Fatalf("npm test skipped %d tests; every test must run here:\n%s\n%s",
			sum["skipped"], strings.Join(tsSkipLines(stdout), "\n"), report())
	case sum["fail"] > 0 || sum["cancelled"] > 0 || sum["pass"] != sum["tests"]:
		t.Fatalf("npm test: %d of %d tests passed\n%s", sum["pass"], sum["tests"], report())
	}
	if skips := tsSkipLines(stdout); len(skips) > 0 {
		t.Fatalf("npm test skipped tests or suites:\n%s\n%s", strings.Join(skips, "\n"), report())
	}

	// The tests worked in their schema, never in the default one, and what
	// the daemon sent carried keys and tuples the provider could verify.
	if n := tsCountRows(t, pool, tsSchema); n == 0 {
		t.Errorf("no row in %s.outbox: the tests did not use DRAINER_TEST_SCHEMA", tsSchema)
	}
	if n := tsCountRows(t, pool, "drainer"); n != 0 {
		t.Errorf("%d rows in drainer.outbox: a test ignored DRAINER_TEST_SCHEMA", n)
	}
	for name, p := range map[string]*mockprovider.Provider{"provider": provider, "unsure": unsure} {
		snap := p.Snapshot()
		if snap.BadRequests != 0 {
			t.Errorf("%s answered %d bad requests (missing or mismatched key/tuple headers)", name, snap.BadRequests)
		}
		if snap.Requests == 0 {
			t.Errorf("%s received no request: the dispatch tests did not reach it", name)
		}
	}
	if dups := provider.DuplicateEffects(); len(dups) != 0 {
		t.Errorf("duplicate effects for keys %v", dups)
	}
	d.requireRunning()
}

// tsConfig routes the tools of sdk/typescript/test/db.test.ts; ts_unrouted
// is deliberately left without a route.
func tsConfig(baseURL, unsureURL string) string {
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
  ts_charge_card:
    adapter: provider
    class: key_idempotent
    max_attempts: 20
    backoff: {base: 50ms, cap: 500ms}
  ts_send_email:
    adapter: provider
    class: key_idempotent
    max_attempts: 20
    backoff: {base: 50ms, cap: 500ms}
  ts_refused:
    adapter: provider
    max_attempts: 3
    backoff: {base: 50ms, cap: 500ms}
  ts_unsure:
    adapter: unsure
    class: non_idempotent
    max_attempts: 3
    backoff: {base: 50ms, cap: 500ms}
`, baseURL, unsureURL)
}

// tsPrepareSDK returns the absolute path of sdk/typescript once its locked
// devDependencies are installed (what `make node-deps` does), running npm ci
// itself when they are missing. The library itself is not built here: dist/
// is committed, and npm test fails when it is not the build of src/.
func tsPrepareSDK(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(tsSDKDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "package-lock.json")); err != nil {
		t.Fatalf("%s has no package-lock.json: %v", dir, err)
	}
	if _, err := exec.LookPath("npm"); err != nil {
		t.Fatalf("npm not found (%v): install Node 20 and run `make node-deps`", err)
	}
	if tsExists(filepath.Join(dir, "node_modules", "typescript", "package.json")) &&
		tsExists(filepath.Join(dir, "node_modules", "pg", "package.json")) {
		return dir
	}
	t.Logf("%s: node_modules missing: running npm ci (what `make node-deps` does)", dir)
	if out, errOut, code := tsRunNPM(t, dir, 5*time.Minute, nil, "ci", "--no-audit", "--no-fund"); code != 0 {
		t.Fatalf("npm ci in %s exited %d; run `make node-deps` and see its output:\n%s\n%s", dir, code, tail(out, 4000), tail(errOut, 4000))
	}
	return dir
}

func tsExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// tsRunNPM runs npm with args in dir, with the test's environment minus
// DRAINER_* variables plus env, and returns its output and exit code.
func tsRunNPM(t *testing.T, dir string, timeout time.Duration, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", args...)
	cmd.Dir = dir
	cmd.Env = childEnv(append([]string{"NO_COLOR=1", "npm_config_update_notifier=false"}, env...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		t.Fatalf("npm %s in %s did not finish within %v\nstdout:\n%s\nstderr:\n%s",
			strings.Join(args, " "), dir, timeout, tail(out.String(), 8000), tail(errOut.String(), 4000))
	case errors.As(err, &ee) && ee.Exited():
		code = ee.ExitCode()
	default:
		t.Fatalf("npm %s in %s: %v\nstderr:\n%s", strings.Join(args, " "), dir, err, tail(errOut.String(), 4000))
	}
	return out.String(), errOut.String(), code
}

// tsSummaryLine matches the run summary of node's test runner: "# tests 27"
// with the TAP reporter (what npm test uses), "ℹ tests 27" with the spec one.
var tsSummaryLine = regexp.MustCompile(`(?m)^(?:#|ℹ) (tests|suites|pass|fail|cancelled|skipped|todo) (\d+)\s*$`)

// tsParseSummary returns the counts of the run summary (the last value of
// each), and an error when the output has none.
func tsParseSummary(out string) (map[string]int, error) {
	sum := map[string]int{}
	for _, m := range tsSummaryLine.FindAllStringSubmatch(out, -1) {
		n, err := strconv.Atoi(m[2])
		if err != nil {
			return nil, fmt.Errorf("summary line %q: %v", m[0], err)
		}
		sum[m[1]] = n
	}
	for _, k := range []string{"tests", "pass", "fail", "skipped"} {
		if _, ok := sum[k]; !ok {
			return nil, fmt.Errorf("no %q count in the output: not node's test runner summary", k)
		}
	}
	return sum, nil
}

// tsResultLines returns the TAP result lines of top-level tests, with their durations.
func tsResultLines(out string) []string {
	var lines []string
	var last string
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "ok ") || strings.HasPrefix(line, "not ok "):
			last = line
		case last != "" && strings.HasPrefix(line, "  duration_ms: "):
			lines = append(lines, last+" ("+strings.TrimPrefix(line, "  duration_ms: ")+" ms)")
			last = ""
		}
	}
	return lines
}

// tsSkipLines returns the TAP result lines carrying a SKIP directive,
// which also catches a skipped suite (node does not count those as skipped tests).
func tsSkipLines(out string) []string {
	var skips []string
	for _, line := range strings.Split(out, "\n") {
		l := strings.TrimSpace(line)
		if (strings.HasPrefix(l, "ok ") || strings.HasPrefix(l, "not ok ")) && strings.Contains(l, " # SKIP") {
			skips = append(skips, l)
		}
	}
	return skips
}

// tsCountRows counts the rows of schema's outbox.
func tsCountRows(t *testing.T, pool *pgxpool.Pool, schema string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+schema+".outbox").Scan(&n); err != nil {
		t.Fatalf("count %s.outbox: %v", schema, err)
	}
	return n
}

// TestTypeScriptSDKSummary checks how TestTypeScriptSDK reads node's test
// runner output: counts from the TAP and spec summaries, skipped tests and
// suites, and output that has no summary.
func TestTypeScriptSDKSummary(t *testing.T) {
	t.Parallel()
	tap := "TAP version 13\n# Subtest: a\nok 1 - a # SKIP no database\n  ---\n  duration_ms: 1.5\n  ...\n" +
		"# Subtest: s\n    not ok 2 - suite # SKIP no daemon\nok 3 - b\n  ---\n  duration_ms: 2\n  ...\n1..3\n" +
		"# tests 2\n# suites 1\n# pass 1\n# fail 0\n# cancelled 0\n# skipped 1\n# todo 0\n# duration_ms 9\n"
	sum, err := tsParseSummary(tap)
	if err != nil {
		t.Fatal(err)
	}
	if sum["tests"] != 2 || sum["pass"] != 1 || sum["skipped"] != 1 || sum["fail"] != 0 {
		t.Errorf("TAP summary = %v", sum)
	}
	if got := tsSkipLines(tap); len(got) != 2 {
		t.Errorf("skip lines = %q, want the skipped test and the skipped suite", got)
	}
	if got := tsResultLines(tap); len(got) != 2 || got[0] != "ok 1 - a # SKIP no database (1.5 ms)" {
		t.Errorf("result lines = %q", got)
	}
	spec := "✔ a (1ms)\nℹ tests 3\nℹ suites 0\nℹ pass 3\nℹ fail 0\nℹ cancelled 0\nℹ skipped 0\nℹ todo 0\n"
	if sum, err := tsParseSummary(spec); err != nil || sum["tests"] != 3 || sum["skipped"] != 0 {
		t.Errorf("spec summary = %v, %v", sum, err)
	}
	if _, err := tsParseSummary("npm error missing script: test\n"); err == nil {
		t.Error("output without a summary accepted")
	}
}

// tsInstallEnv is the environment of the install steps: no colours, no
// notices, and npm's cache preferred to the registry.
var tsInstallEnv = []string{"NO_COLOR=1", "npm_config_update_notifier=false", "npm_config_audit=false",
	"npm_config_fund=false", "npm_config_prefer_offline=true"}

// tsScriptWarning matches npm's warnings about install scripts (npm 11's
// "npm warn install-scripts … not yet covered by allowScripts") and about
// peer dependencies it could not satisfy.
var tsScriptWarning = regexp.MustCompile(`(?i)^npm warn.*(script|peer|ERESOLVE)`)

// tsScriptWarnings returns the lines of npm's output that tsScriptWarning matches.
func tsScriptWarnings(out string) []string {
	var w []string
	for _, line := range strings.Split(out, "\n") {
		if tsScriptWarning.MatchString(strings.TrimSpace(line)) {
			w = append(w, line)
		}
	}
	return w
}

// tsRequireAndImport checks, in a project that installed @drainer/client,
// that CommonJS require and ES module import both load the package and its
// receiver, derive the Go key, and are one implementation.
func tsRequireAndImport(t *testing.T, project string) {
	t.Helper()
	key := installTuple.Key()
	cjs := `const m = require('@drainer/client'); const r = require('@drainer/client/receiver');
console.log(m.idempotencyKey({agentRunId: 'run-1', stepId: 'step-1', toolName: 'charge_card', businessScope: ''}), typeof r.createReceiver, typeof m.PayloadError);`
	if got := strings.TrimSpace(installRun(t, project, tsInstallEnv, "node", "-e", cjs)); !strings.HasSuffix(got, key+" function function") {
		t.Errorf("require('@drainer/client') printed %q, want %q", got, key+" function function")
	}
	esm := `import { idempotencyKey, enqueue, PayloadError } from '@drainer/client';
import { createReceiver } from '@drainer/client/receiver';
import { createRequire } from 'node:module';
const require = createRequire(process.cwd() + '/');
const same = require('@drainer/client').enqueue === enqueue && require('@drainer/client').PayloadError === PayloadError &&
  require('@drainer/client/receiver').createReceiver === createReceiver;
console.log(idempotencyKey({agentRunId: 'run-1', stepId: 'step-1', toolName: 'charge_card', businessScope: ''}), typeof createReceiver, same);`
	if got := strings.TrimSpace(installRun(t, project, tsInstallEnv, "node", "--input-type=module", "-e", esm)); !strings.HasSuffix(got, key+" function true") {
		t.Errorf("import of @drainer/client printed %q, want %q (the last word: require and import load the same module)", got, key+" function true")
	}
}

// tsTreeSnapshot describes every entry under dir (symbolic links not
// followed): its type, mode, and for a file its size and SHA-256.
func tsTreeSnapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	snap := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		info, err := d.Info()
		if err != nil {
			return err
		}
		desc := info.Mode().String()
		if info.Mode().IsRegular() {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" %d bytes sha256 %x", len(b), sha256.Sum256(b))
		}
		snap[filepath.ToSlash(rel)] = desc
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	return snap
}

// tsTreeDiff lists what differs between two snapshots of one tree: entries
// added, removed or changed (at most 20 lines).
func tsTreeDiff(before, after map[string]string) []string {
	var diff []string
	for p, a := range after {
		switch b, ok := before[p]; {
		case !ok:
			diff = append(diff, "added: "+p)
		case a != b:
			diff = append(diff, "changed: "+p)
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			diff = append(diff, "removed: "+p)
		}
	}
	sort.Strings(diff)
	if len(diff) > 20 {
		diff = append(diff[:20], fmt.Sprintf("… and %d more", len(diff)-20))
	}
	return diff
}
