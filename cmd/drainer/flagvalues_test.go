package main

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runConfig is a valid config for `drainer run` (its provider never answers).
const runConfig = `
workers: 8
adapters:
  provider: {type: http, url: "http://127.0.0.1:9/{tool_name}", timeout: 5s}
routes:
  charge_card: {adapter: provider}
`

// TestRunFlagValuesAreUsageErrors: a bad value of run's --workers,
// --metrics-addr or --shutdown-timeout is a usage error (exit 2) naming the
// flag, said before anything starts: before the config file is read (it
// does not exist here) and the database reached. --workers 0 is refused
// too: the help documents leaving it unset, not 0, for "the config's
// workers".
func TestRunFlagValuesAreUsageErrors(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "absent.yaml")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workers", "-1"}, "--workers: must be between 1 and 4096, got -1"},
		{[]string{"--workers", "0"}, "--workers: must be between 1 and 4096, got 0 (leave it unset to use the config's workers)"},
		{[]string{"--workers", "5000"}, "--workers: must be between 1 and 4096, got 5000"},
		{[]string{"--metrics-addr", "notanaddr"}, `--metrics-addr: "notanaddr" is not a host:port address like :9753 or 127.0.0.1:9753 (missing port in address)`},
		{[]string{"--metrics-addr", ":99999"}, `--metrics-addr: ":99999" is not a host:port address`},
		{[]string{"--metrics-addr", "127.0.0.1:"}, `--metrics-addr: "127.0.0.1:" is not a host:port address`},
		{[]string{"--shutdown-timeout", "-1s"}, "--shutdown-timeout: must be positive, got -1s"},
		{[]string{"--shutdown-timeout", "0s"}, "--shutdown-timeout: must be positive, got 0s"},
	} {
		args := append([]string{"run", "--config", cfg, "--database-url", unreachableURL}, tc.args...)
		start := time.Now()
		code, _, errb := runCLI(args...)
		if code != exitUsage || !strings.Contains(errb, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errb, tc.want)
		}
		if d := time.Since(start); d > 3*time.Second || strings.Contains(errb, "absent.yaml") {
			t.Errorf("%v: refused after %s, stderr %q: something started first", tc.args, d, errb)
		}
	}
}

// TestRunFlagValuesFromEnvironment: the same values from DRAINER_<FLAG>
// are refused naming the variable, not the flag (DRAINER_WORKERS=0 is not
// silently ignored); the flag given on the command line wins and is named.
func TestRunFlagValuesFromEnvironment(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "absent.yaml")
	for _, tc := range []struct {
		env, value, want string
	}{
		{"DRAINER_WORKERS", "0", "DRAINER_WORKERS: must be between 1 and 4096, got 0"},
		{"DRAINER_WORKERS", "-1", "DRAINER_WORKERS: must be between 1 and 4096, got -1"},
		{"DRAINER_METRICS_ADDR", "notanaddr", `DRAINER_METRICS_ADDR: "notanaddr" is not a host:port address`},
		{"DRAINER_SHUTDOWN_TIMEOUT", "-1s", "DRAINER_SHUTDOWN_TIMEOUT: must be positive, got -1s"},
	} {
		t.Run(tc.env+"="+tc.value, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			code, _, errb := runCLI("run", "--config", cfg, "--database-url", unreachableURL)
			want(t, code, errb, exitUsage, tc.want)
			if strings.Contains(errb, "--") {
				t.Errorf("stderr %q names a flag; the value came from %s", errb, tc.env)
			}
		})
	}
	t.Setenv("DRAINER_WORKERS", "2")
	code, _, errb := runCLI("run", "--config", cfg, "--database-url", unreachableURL, "--workers", "-3")
	want(t, code, errb, exitUsage, "--workers: must be between 1 and 4096, got -3")
}

// TestRunFlagValuesWithAWorkingSetup: the probes' setup (a valid config, a
// migrated database), where --workers -1 and --metrics-addr notanaddr
// used to fail at start as runtime errors (exit 1): exit 2 naming the flag.
func TestRunFlagValuesWithAWorkingSetup(t *testing.T) {
	t.Parallel()
	d := newOpsDB(t)
	cfg := writeTemp(t, t.TempDir(), "c.yaml", runConfig)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workers", "-1"}, "--workers: must be between 1 and 4096, got -1"},
		{[]string{"--metrics-addr", "notanaddr"}, `--metrics-addr: "notanaddr" is not a host:port address`},
	} {
		code, _, errb := runCLI(append([]string{"run", "--config", cfg, "--database-url", d.url}, tc.args...)...)
		want(t, code, errb, exitUsage, tc.want)
	}
}

// TestRunMetricsAddrInUse: a well-formed --metrics-addr that another
// process holds is a setting to change (exit 2) naming the flag and the
// address, as a taken console or gateway address is.
func TestRunMetricsAddrInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := writeTemp(t, t.TempDir(), "drainer.yaml", runConfig)
	code, _, errb := runCLI("run", "--config", cfg, "--database-url", unreachableURL, "--metrics-addr", ln.Addr().String())
	want(t, code, errb, exitUsage, "--metrics-addr: listen on "+ln.Addr().String())
}

// TestConformanceConcurrencyZero: --concurrency 0 (or DRAINER_CONCURRENCY=0)
// is refused like 1 or 100000, exit 2, not run with the default 10: the
// default is the flag's, documented as 10, not 0.
func TestConformanceConcurrencyZero(t *testing.T) {
	code, out, errb := runCLI("conformance", "--url", "http://127.0.0.1:1/", "--concurrency", "0")
	want(t, code, errb, exitUsage, "--concurrency: 0 is outside 2..1000")
	if out != "" {
		t.Errorf("stdout %q: something ran", out)
	}
	t.Setenv("DRAINER_CONCURRENCY", "0")
	code, _, errb = runCLI("conformance", "--url", "http://127.0.0.1:1/")
	want(t, code, errb, exitUsage, "DRAINER_CONCURRENCY: 0 is outside 2..1000")
	t.Setenv("DRAINER_CONCURRENCY", "1")
	code, _, errb = runCLI("conformance", "--url", "http://127.0.0.1:1/")
	want(t, code, errb, exitUsage, "DRAINER_CONCURRENCY: 1 is outside 2..1000")
}

// TestFlagValueErrorsNameTheEnvironment: a bad value that came from
// DRAINER_<FLAG> is named by that variable, as DRAINER_LIMIT=abc is, for
// --output and the flags checked after parsing like it; given on the
// command line, the flag is named.
func TestFlagValueErrorsNameTheEnvironment(t *testing.T) {
	for _, tc := range []struct {
		env, value string
		args       []string
		want       string
	}{
		{"DRAINER_OUTPUT", "xml", []string{"list", "--database-url", "postgres://x"}, `DRAINER_OUTPUT: "xml" is not table or json`},
		{"DRAINER_OUTPUT", "xml", []string{"stats", "--database-url", "postgres://x"}, `DRAINER_OUTPUT: "xml" is not table or json`},
		{"DRAINER_OUTPUT", "xml", []string{"stats", "--all", "--config", "x.yaml"}, `DRAINER_OUTPUT: "xml" is not table or json`},
		{"DRAINER_OUTPUT", "xml", []string{"conformance", "--url", "http://127.0.0.1:1/"}, `DRAINER_OUTPUT: "xml" is not text or json`},
		{"DRAINER_LOG_FORMAT", "xml", []string{"version"}, `DRAINER_LOG_FORMAT: "xml" is not json or text`},
		{"DRAINER_LOG_LEVEL", "loud", []string{"version"}, `DRAINER_LOG_LEVEL: "loud" is not one of debug`},
		{"DRAINER_LIMIT", "0", []string{"list", "--database-url", "postgres://x"}, "DRAINER_LIMIT: must be between 1 and"},
		{"DRAINER_LIMIT", "abc", []string{"list", "--database-url", "postgres://x"}, `DRAINER_LIMIT: strconv.ParseInt: parsing "abc"`},
		{"DRAINER_STATUS", "bogus", []string{"list", "--database-url", "postgres://x"}, "DRAINER_STATUS: "},
		{"DRAINER_OLDER_THAN", "soon", []string{"list", "--database-url", "postgres://x"}, `DRAINER_OLDER_THAN: "soon" is not a duration`},
		{"DRAINER_AFTER_SEQ", "-1", []string{"list", "--database-url", "postgres://x"}, "DRAINER_AFTER_SEQ: must not be negative"},
		{"DRAINER_BATCH_SIZE", "0", []string{"requeue", "--database-url", "postgres://x", "--status", "failed"}, "DRAINER_BATCH_SIZE: must be positive"},
		{"DRAINER_OUTCOME", "maybe", []string{"resolve", "k", "--database-url", "postgres://x", "--note", "n"}, `DRAINER_OUTCOME: "maybe" is not succeeded or failed`},
		{"DRAINER_LOCK_WAIT", "-1s", []string{"migrate", "--database-url", "postgres://x"}, "DRAINER_LOCK_WAIT: must not be negative"},
		{"DRAINER_MODE", "strict", []string{"conformance", "--url", "http://127.0.0.1:1/"}, `DRAINER_MODE: "strict" is not seed or ietf`},
		{"DRAINER_URL", "ftp://h/x", []string{"conformance"}, "DRAINER_URL: ftp://h/x: scheme must be http or https"},
	} {
		t.Run(tc.env+"="+tc.value, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			code, _, errb := runCLI(tc.args...)
			want(t, code, errb, exitUsage, tc.want)
			flag := "--" + strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(tc.env, "DRAINER_")), "_", "-")
			if strings.Contains(errb, flag+":") {
				t.Errorf("stderr %q names %s; the value came from %s", errb, flag, tc.env)
			}
			// The flag given wins over the environment, and is named.
			code, _, errb = runCLI(append(tc.args, flag, tc.value)...)
			want(t, code, errb, exitUsage, flag)
		})
	}
}

// TestDemoFlagValuesAreUsageErrors: demo's --workers and --runs out of
// range are usage errors (exit 2) naming the flag, said before anything
// starts (before, a cluster was started and rows enqueued, then the demo's
// own config file was blamed, exit 1).
func TestDemoFlagValuesAreUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workers", "-5"}, "--workers: must be between 1 and 4096, got -5"},
		{[]string{"--workers", "5000"}, "--workers: must be between 1 and 4096, got 5000"},
		{[]string{"--runs", "0"}, "--runs: must be at least 1, got 0"},
	} {
		code, out, errb := runCLI(append([]string{"demo"}, tc.args...)...)
		if code != 2 || !strings.Contains(errb, tc.want) || out != "" {
			t.Errorf("demo %v: exit %d, stdout %q, stderr %q; want exit 2 naming %q and nothing started", tc.args, code, out, errb, tc.want)
		}
	}
}
