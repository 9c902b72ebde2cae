package config

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"github.com/drainer-io/drainer/dispatch/execplugin"
	"github.com/drainer-io/drainer/dispatch/natsjs"
	"github.com/drainer-io/drainer/dispatch/pgtable"
	"github.com/drainer-io/drainer/dispatch/riverjob"
	"github.com/drainer-io/drainer/dispatch/stripe"
	"github.com/drainer-io/drainer/dispatch/webhook"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/outbox"
)

// testEnv is the environment of the tests: the secrets of the example
// configs and a few values used by error cases.
var testEnv = map[string]string{
	"DRAINER_DATABASE_URL": "postgres://drainer:db-pass-1@db/drainer",
	"PAYMENTS_TOKEN":       "pay-token-1",
	"BACKUP_TOKEN":         "backup-token-1",
	"PAGER_TOKEN":          "pager-token-1",
	"TOOLS_TOKEN":          "tools-token-1",
	"LEDGER_PASSWORD":      "ledger-pass-1",
	"JOBS_PASSWORD":        "jobs-pass-1",
	"EMPTY":                "",
}

// testFiles are the files ${file:…} references can read in tests.
var testFiles = map[string]string{
	"/run/secrets/stripe_key": "sk_test_123\n",
	"/run/secrets/two_lines":  "line1\nline2\n\n",
	"/run/secrets/crlf":       "value\r\n",
}

func testOptions(check bool) LoadOptions {
	return LoadOptions{
		Check: check,
		LookupEnv: func(name string) (string, bool) {
			v, ok := testEnv[name]
			return v, ok
		},
		ReadFile: func(path string) ([]byte, error) {
			v, ok := testFiles[path]
			if !ok {
				return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
			}
			return []byte(v), nil
		},
	}
}

// parse parses a config written as a raw string literal; the literal's
// first newline is dropped, so its first line is line 1.
func parse(t *testing.T, yaml string, check bool) (*Config, error) {
	t.Helper()
	return Parse("c.yaml", []byte(strings.TrimPrefix(yaml, "\n")), testOptions(check))
}

// mustParse parses a config that must be valid.
func mustParse(t *testing.T, yaml string, check bool) *Config {
	t.Helper()
	cfg, err := parse(t, yaml, check)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return cfg
}

// errorLines returns the messages of an error from Parse, one per entry.
func errorLines(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	list, ok := errors.AsType[Errors](err)
	if !ok {
		t.Fatalf("error is %T, want Errors: %v", err, err)
	}
	lines := make([]string, len(list))
	for i, e := range list {
		lines[i] = e.Error()
	}
	return lines
}

func assertLines(t *testing.T, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got:\n\t%s\nwant:\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

func TestLoadExample(t *testing.T) {
	cfg, err := Load("testdata/example.yaml", testOptions(false))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if cfg.Path != "testdata/example.yaml" || len(cfg.Warnings) != 0 {
		t.Errorf("Path %q, Warnings %q", cfg.Path, cfg.Warnings)
	}
	if got := cfg.DatabaseURL.Reveal(); got != testEnv["DRAINER_DATABASE_URL"] {
		t.Errorf("DatabaseURL = %q", got)
	}
	if cfg.Workers != 16 || cfg.Lease != 30*time.Second || cfg.UnroutedRecheck != 15*time.Second {
		t.Errorf("workers %d, lease %v, unrouted_recheck %v", cfg.Workers, cfg.Lease, cfg.UnroutedRecheck)
	}
	if cfg.Alerts.CompensationFailed != "pager" {
		t.Errorf("alerts.compensation_failed = %q", cfg.Alerts.CompensationFailed)
	}
	if got := cfg.AdapterNames(); strings.Join(got, ",") != "backup,pager,payments" {
		t.Errorf("AdapterNames = %q", got)
	}

	p := cfg.Adapters["payments"]
	if p.Name != "payments" || p.Type != "http" || p.File != "testdata/example.yaml" || p.Line != 11 {
		t.Errorf("payments: name %q type %q at %s:%d", p.Name, p.Type, p.File, p.Line)
	}
	ps := settingsOf[webhook.Settings](t, p)
	if ps.URL != "http://payments.internal/v1/{tool_name}" || p.Timeout != 10*time.Second || p.KeyTTL != 24*time.Hour {
		t.Errorf("payments: url %q timeout %v key_ttl %v", ps.URL, p.Timeout, p.KeyTTL)
	}
	if got := ps.Headers["Authorization"].Reveal(); got != "Bearer pay-token-1" {
		t.Errorf("Authorization = %q", got)
	}
	if got := ps.Headers["X-Tenant"].Reveal(); got != "acme" {
		t.Errorf("X-Tenant = %q", got)
	}
	if p.Breaker.Failures() != 5 || p.Breaker.Disabled() || p.Breaker.OpenFor != 30*time.Second {
		t.Errorf("payments breaker: %d %v", p.Breaker.Failures(), p.Breaker.OpenFor)
	}
	if p.RateLimit == nil || p.RateLimit.PerSecond != 100 || p.RateLimit.Burst != 100 || p.RateLimit.Text != "100/s" {
		t.Errorf("payments rate_limit = %+v", p.RateLimit)
	}
	if p.MaxConcurrency != 32 {
		t.Errorf("payments max_concurrency = %d", p.MaxConcurrency)
	}

	// backup: defaults.
	b := cfg.Adapters["backup"]
	if b.Timeout != DefaultAdapterTimeout || b.Breaker.Failures() != DefaultBreakerFailures ||
		b.Breaker.OpenFor != DefaultBreakerOpenFor || b.RateLimit != nil || b.MaxConcurrency != 0 || b.KeyTTL != 0 {
		t.Errorf("backup defaults: %+v", b)
	}
	if got := settingsOf[webhook.Settings](t, b).Headers["Authorization"].Reveal(); got != "Bearer backup-token-1" {
		t.Errorf("backup Authorization = %q", got)
	}
	if !cfg.Adapters["pager"].Breaker.Disabled() {
		t.Error("pager breaker should be disabled")
	}

	charge, ok := cfg.RouteFor("charge_card")
	if !ok {
		t.Fatal("no route charge_card")
	}
	if charge.ToolName != "charge_card" || charge.Line != 32 || charge.Adapter != "payments" ||
		charge.Class != outbox.ClassKeyIdempotent || charge.MaxAttempts != 12 || charge.Compensation != "refund_card" ||
		charge.IsCritical() || charge.Fallback != "backup" || charge.Ordering != outbox.OrderingNone {
		t.Errorf("charge_card = %+v", charge)
	}
	if charge.Backoff != (Backoff{Base: time.Second, Cap: 10 * time.Minute, MaxRetryAfter: time.Hour}) {
		t.Errorf("charge_card backoff = %+v", charge.Backoff)
	}

	refund, _ := cfg.RouteFor("refund_card")
	want := Route{ToolName: "refund_card", Adapter: "payments", Class: outbox.ClassKeyIdempotent, MaxAttempts: DefaultMaxAttempts,
		Backoff:  Backoff{Base: DefaultBackoffBase, Cap: DefaultBackoffCap, MaxRetryAfter: DefaultMaxRetryAfter},
		Ordering: outbox.OrderingNone, File: "testdata/example.yaml", Line: 41}
	if !refund.IsCritical() || refund.Critical == nil {
		t.Errorf("refund_card should be critical, explicitly")
	}
	refund.Critical = nil
	if !reflect.DeepEqual(*refund, want) {
		t.Errorf("refund_card =\n%+v\nwant\n%+v", *refund, want)
	}
	if _, ok := cfg.RouteFor("nope"); ok {
		t.Error("RouteFor(nope) found a route")
	}
	if got, want := cfg.Summary(), "adapters: backup (http), pager (http), payments (http); routes: 2; workers: 16; lease: 30s"; got != want {
		t.Errorf("Summary = %q, want %q", got, want)
	}
}

func TestLoadAllTypes(t *testing.T) {
	cfg, err := Load("testdata/all_types.yaml", testOptions(false))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	s := settingsOf[stripe.Settings](t, cfg.Adapters["stripe"])
	if s.APIKey.Reveal() != "sk_test_123" || s.StripeVersion != "2024-06-20" || s.BaseURL != "http://localhost:12111" {
		t.Errorf("stripe = %+v (api key %q)", s, s.APIKey.Reveal())
	}
	l := settingsOf[pgtable.Settings](t, cfg.Adapters["ledger"])
	if l.DSN.Reveal() != "postgres://ledger:ledger-pass-1@ledger-db:5432/ledger?sslmode=require" || l.Table != "public.ledger_events" {
		t.Errorf("ledger dsn %q table %q", l.DSN.Reveal(), l.Table)
	}
	j := settingsOf[riverjob.Settings](t, cfg.Adapters["jobs"])
	if j.DSN.Reveal() != "host=jobs-db user=app password=jobs-pass-1 dbname=jobs" || j.Queue != "outbox" || j.JobKind != "send_email" || j.Schema != "river" {
		t.Errorf("jobs = %+v", j)
	}
	e := settingsOf[natsjs.Settings](t, cfg.Adapters["events"])
	if cfg.Adapters["events"].KeyTTL != 2*time.Minute {
		t.Errorf("events key_ttl %s", cfg.Adapters["events"].KeyTTL)
	}
	if strings.Join(e.Servers, ",") != "nats://nats-1:4222,nats://nats-2:4222" || e.Subject != "outbox.events" || e.Stream != "OUTBOX" {
		t.Errorf("events = %+v", e)
	}
	p := cfg.Adapters["legacy"]
	if ps := settingsOf[execplugin.Settings](t, p); ps.Command != "/usr/local/bin/legacy-adapter" || strings.Join(ps.Args, " ") != "--mode strict" || len(ps.SHA256) != 64 {
		t.Errorf("legacy = %+v", ps)
	}
	if p.RateLimit.PerSecond != 0.5 || p.RateLimit.Burst != 1 || p.MaxConcurrency != 2 {
		t.Errorf("legacy rate limit %+v, max_concurrency %d", p.RateLimit, p.MaxConcurrency)
	}
	legacy, _ := cfg.RouteFor("call_legacy")
	if legacy.Backoff.MaxRetryAfter != 0 || legacy.Backoff.Cap != time.Minute || legacy.Class != outbox.ClassNonIdempotent {
		t.Errorf("call_legacy: explicit max_retry_after 0 must be kept: %+v", legacy)
	}
	if r, _ := cfg.RouteFor("record_entry"); r.Ordering != outbox.OrderingBusinessScope || r.Class != outbox.ClassNaturallyIdempotent {
		t.Errorf("record_entry = %+v", r)
	}
	if r, _ := cfg.RouteFor("send_email"); r.IsCritical() || r.Fallback != "events" {
		t.Errorf("send_email = %+v", r)
	}
}

func TestLoadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := Load(path, LoadOptions{})
	assertLines(t, errorLines(t, err), []string{path + ": cannot read config file: no such file or directory"})
}

func TestLoadReadsEnvAndFiles(t *testing.T) {
	// The default LookupEnv and ReadFile: the process environment and the
	// file system.
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "token")
	if err := os.WriteFile(secretFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DRAINER_CONFIG_TEST_TOKEN", "from-env")
	cfgFile := filepath.Join(dir, "drainer.yaml")
	data := "adapters:\n  p:\n    type: http\n    url: http://p/{tool_name}\n    headers:\n" +
		"      Authorization: Bearer ${env:DRAINER_CONFIG_TEST_TOKEN}\n      X-Secret: ${file:" + secretFile + "}\n" +
		"routes:\n  t: {adapter: p}\n"
	if err := os.WriteFile(cfgFile, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(cfgFile, LoadOptions{})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	h := settingsOf[webhook.Settings](t, cfg.Adapters["p"]).Headers
	if h["Authorization"].Reveal() != "Bearer from-env" || h["X-Secret"].Reveal() != "from-file" {
		t.Errorf("headers: %q, %q", h["Authorization"].Reveal(), h["X-Secret"].Reveal())
	}
}

func TestEmptyConfig(t *testing.T) {
	for name, yaml := range map[string]string{
		"empty":         "",
		"comments only": "# nothing here yet\n\n# really\n",
		"null":          "~\n",
		"document mark": "---\n",
	} {
		t.Run(name, func(t *testing.T) {
			cfg := mustParse(t, yaml, false)
			if len(cfg.Adapters) != 0 || len(cfg.Routes) != 0 || cfg.Adapters == nil || cfg.Routes == nil {
				t.Errorf("adapters %v routes %v", cfg.Adapters, cfg.Routes)
			}
			if cfg.Workers != DefaultWorkers || cfg.Lease != DefaultLease || cfg.UnroutedRecheck != DefaultUnroutedRecheck {
				t.Errorf("defaults not applied: %+v", cfg)
			}
			assertLines(t, cfg.Warnings, []string{
				"c.yaml: routes: no routes are configured: every row stays unrouted until a config with routes is loaded",
			})
		})
	}
}

func TestWarnings(t *testing.T) {
	cfg := mustParse(t, `
adapters:
  used: {type: http, url: "http://u/{tool_name}"}
  spare: {type: http, url: "http://s/{tool_name}"}
routes:
  t: {adapter: used}
`, false)
	assertLines(t, cfg.Warnings, []string{
		"c.yaml:3:3: adapters.spare: adapter spare is not used by any route, fallback or alert",
	})

	// A key window shorter than what a reclaimed row waits.
	cfg = mustParse(t, `
adapters:
  p: {type: http, url: "http://p/{tool_name}", key_ttl: 2m}
routes:
  short: {adapter: p}
  quick: {adapter: p, backoff: {max_retry_after: 10s}}
  own: {adapter: p, key_ttl: 30m, backoff: {max_retry_after: 5m}}
`, false)
	assertLines(t, cfg.Warnings, []string{
		"c.yaml:2:48: adapters.p.key_ttl: key_ttl 2m (less the 1m margin) is shorter than lease 30s plus 1h, routes.short.backoff.max_retry_after (not set: its default), the longest a reclaimed row of route short may wait: a row whose replica died mid-call could end failed by the key-TTL guard though its effect may exist; set routes.short.backoff.max_retry_after below 30s, or raise key_ttl",
	})
	cfg = mustParse(t, `
adapters:
  p: {type: http, url: "http://p/{tool_name}", key_ttl: 5m}
routes:
  held: {adapter: p, reclaim_hold: 10m, backoff: {max_retry_after: 10s}}
`, false)
	assertLines(t, cfg.Warnings, []string{
		"c.yaml:2:48: adapters.p.key_ttl: key_ttl 5m (less the 1m margin) is shorter than lease 30s plus 10m, routes.held.reclaim_hold, the longest a reclaimed row of route held may wait: a row whose replica died mid-call could end failed by the key-TTL guard though its effect may exist; set routes.held.reclaim_hold below 3m30s, or raise key_ttl",
	})

	cfg = mustParse(t, "workers: 4\nroutes: {}\n", false)
	assertLines(t, cfg.Warnings, []string{
		"c.yaml:2:1: routes: no routes are configured: every row stays unrouted until a config with routes is loaded",
	})
}

func TestCheckMode(t *testing.T) {
	const yaml = `
database_url: ${env:UNSET_DB}
adapters:
  p:
    type: http
    url: ${env:UNSET_URL}
    headers:
      Authorization: Bearer ${env:UNSET_TOKEN}
      X-Key: ${file:/run/secrets/missing}
    timeout: ${env:UNSET_TIMEOUT}
routes:
  t: {adapter: p}
`
	_, err := parse(t, yaml, false)
	assertLines(t, errorLines(t, err), []string{
		"c.yaml:1:15: database_url: environment variable UNSET_DB is not set (${env:UNSET_DB})",
		"c.yaml:5:10: adapters.p.url: environment variable UNSET_URL is not set (${env:UNSET_URL})",
		"c.yaml:7:22: adapters.p.headers.Authorization: environment variable UNSET_TOKEN is not set (${env:UNSET_TOKEN})",
		"c.yaml:8:14: adapters.p.headers.X-Key: cannot read ${file:/run/secrets/missing}: file does not exist",
		"c.yaml:9:14: adapters.p.timeout: environment variable UNSET_TIMEOUT is not set (${env:UNSET_TIMEOUT})",
	})

	cfg, err := parse(t, yaml, true)
	if err != nil {
		t.Fatalf("check mode: %v", err)
	}
	assertLines(t, cfg.Warnings, []string{
		"c.yaml:1:15: database_url: environment variable UNSET_DB is not set (${env:UNSET_DB})",
		"c.yaml:5:10: adapters.p.url: environment variable UNSET_URL is not set (${env:UNSET_URL})",
		"c.yaml:7:22: adapters.p.headers.Authorization: environment variable UNSET_TOKEN is not set (${env:UNSET_TOKEN})",
		"c.yaml:8:14: adapters.p.headers.X-Key: cannot read ${file:/run/secrets/missing}: file does not exist",
		"c.yaml:9:14: adapters.p.timeout: environment variable UNSET_TIMEOUT is not set (${env:UNSET_TIMEOUT})",
	})
	p := settingsOf[webhook.Settings](t, cfg.Adapters["p"])
	if p.URL != "" || p.Headers["Authorization"].Reveal() != "" || cfg.DatabaseURL.Reveal() != "" {
		t.Errorf("unresolved values must be left empty: url %q", p.URL)
	}
	if cfg.Adapters["p"].Timeout != DefaultAdapterTimeout {
		t.Errorf("unresolved timeout: got %v, want the default", cfg.Adapters["p"].Timeout)
	}

	// Check mode still reports real errors.
	_, err = parse(t, "workers: 0\nlease: ${env:UNSET}\n", true)
	assertLines(t, errorLines(t, err), []string{"c.yaml:1:10: workers: must be between 1 and 4096, got \"0\""})
}

func TestMergeKeysAndAliases(t *testing.T) {
	cfg := mustParse(t, `
adapters:
  primary: &http
    type: http
    url: http://a/{tool_name}
    timeout: 5s
    headers: &auth {Authorization: "Bearer ${env:PAYMENTS_TOKEN}"}
  secondary:
    <<: *http
    url: http://b/{tool_name}
routes:
  t: {adapter: primary, critical: false, fallback: secondary}
  u: {adapter: secondary}
`, false)
	s := cfg.Adapters["secondary"]
	if ss := settingsOf[webhook.Settings](t, s); s.Type != "http" || ss.URL != "http://b/{tool_name}" || s.Timeout != 5*time.Second ||
		ss.Headers["Authorization"].Reveal() != "Bearer pay-token-1" || s.Line != 7 {
		t.Errorf("secondary = %+v", s)
	}
}

func TestExplicitValues(t *testing.T) {
	cfg := mustParse(t, `
workers: "8"
lease: 2m
unrouted_recheck: 1m30s
adapters:
  p:
    type: http
    url: http://p/{tool_name}
    timeout: 1m
    breaker: {consecutive_failures: 0, open_for: 1s}
    rate_limit: 90/m
routes:
  t:
    adapter: p
    class: non_idempotent
    critical: FALSE
    max_attempts: 1
    backoff: {base: 100ms, cap: 100ms, max_retry_after: 0s}
`, false)
	if cfg.Workers != 8 || cfg.Lease != 2*time.Minute || cfg.UnroutedRecheck != 90*time.Second {
		t.Errorf("top level: %+v", cfg)
	}
	p := cfg.Adapters["p"]
	if !p.Breaker.Disabled() || p.Breaker.OpenFor != time.Second || p.RateLimit.PerSecond != 1.5 || p.RateLimit.Burst != 2 {
		t.Errorf("p = %+v, rate %+v", p, p.RateLimit)
	}
	r := cfg.Routes["t"]
	if r.IsCritical() || r.MaxAttempts != 1 || r.Backoff != (Backoff{Base: 100 * time.Millisecond, Cap: 100 * time.Millisecond}) {
		t.Errorf("t = %+v", r)
	}
	if got, want := cfg.Summary(), "adapters: p (http); routes: 1; workers: 8; lease: 2m"; got != want {
		t.Errorf("Summary = %q, want %q", got, want)
	}
}

func TestAliasExpansionIsBounded(t *testing.T) {
	// Each level merges the previous one ten times: 10^8 keys unbounded.
	var b strings.Builder
	b.WriteString("adapters:\n  l0: &l0 {k0: 1, k1: 1, k2: 1, k3: 1, k4: 1, k5: 1, k6: 1, k7: 1, k8: 1, k9: 1}\n")
	for i := 1; i <= 8; i++ {
		prev := fmt.Sprintf("*l%d", i-1)
		b.WriteString(fmt.Sprintf("  l%d: &l%d {<<: [%s]}\n", i, i, strings.TrimSuffix(strings.Repeat(prev+", ", 10), ", ")))
	}
	start := time.Now()
	_, err := parse(t, b.String(), false)
	if err == nil || !strings.Contains(err.Error(), "through aliases") {
		t.Errorf("err = %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}

// TestCheckModePluginExecutable: `drainer check` warns about a plugin
// executable that `drainer run` would refuse to start on this machine
// (missing, not executable, another sha256), naming a path that came from
// a reference by its reference; run leaves that to the adapter's start.
func TestCheckModePluginExecutable(t *testing.T) {
	dir := t.TempDir()
	plain, runnable := filepath.Join(dir, "plain"), filepath.Join(dir, "runnable")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(runnable, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	const sum = "e38b3a1ea6e0d5a3f8e4d7f1f6cb7e8b3b5e0d2cf6dd7e1d5a6c1f0c3b5a7e9d" // not runnable's
	yaml := fmt.Sprintf(`
adapters:
  gone: {type: plugin, command: /nonexistent/plugin}
  plain: {type: plugin, command: %s}
  pinned: {type: plugin, command: %s, sha256: %s}
  fine: {type: plugin, command: %s}
  ref: {type: plugin, command: "${env:PLUGIN_PATH}"}
routes:
  a: {adapter: gone}
  b: {adapter: plain}
  c: {adapter: pinned}
  d: {adapter: fine}
  e: {adapter: ref}
`, plain, runnable, sum, runnable)
	for _, env := range []map[string]string{{"PLUGIN_PATH": "/nonexistent/from-env"}, {}} {
		opts := LoadOptions{Check: true, LookupEnv: func(name string) (string, bool) { v, ok := env[name]; return v, ok }}
		cfg, err := Parse("c.yaml", []byte(strings.TrimPrefix(yaml, "\n")), opts)
		if err != nil {
			t.Fatalf("check mode: %v", err)
		}
		want := []string{
			`c.yaml:2:24: adapters.gone.command: on this machine, plugin executable "/nonexistent/plugin" does not exist: drainer run would refuse to start the adapter`,
			`c.yaml:3:25: adapters.plain.command: on this machine, plugin executable "` + plain + `" is not executable: drainer run would refuse to start the adapter`,
			`c.yaml:4:26: adapters.pinned.command: on this machine, plugin executable "` + runnable + `" has sha256 ` + sha256Hex(t, runnable) + `, not the one sha256 pins: drainer run would refuse to start the adapter`,
			`c.yaml:6:23: adapters.ref.command: on this machine, plugin executable the value of "${env:PLUGIN_PATH}" does not exist: drainer run would refuse to start the adapter`,
		}
		if len(env) == 0 {
			want[3] = `c.yaml:6:32: adapters.ref.command: environment variable PLUGIN_PATH is not set (${env:PLUGIN_PATH})`
		}
		assertLines(t, cfg.Warnings, want)
		if strings.Contains(strings.Join(cfg.Warnings, "\n"), "from-env") {
			t.Errorf("a warning quotes the value of ${env:PLUGIN_PATH}: %q", cfg.Warnings)
		}
	}
	const run = "adapters:\n  gone: {type: plugin, command: /nonexistent/plugin}\nroutes:\n  a: {adapter: gone}\n"
	if cfg, err := Parse("c.yaml", []byte(run), LoadOptions{}); err != nil || len(cfg.Warnings) != 0 {
		t.Errorf("run mode: %v, warnings %q; want neither (the adapter's start refuses it)", err, cfg.Warnings)
	}
}

// sha256Hex returns the SHA-256 of the file at path, in hex.
func sha256Hex(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))
}

// TestCheckModeKafkaTLSFiles: a TLS file drainer run cannot read (it
// refuses to start the adapter) is a warning of check, which may run on
// another machine; a readable CA file is not.
func TestCheckModeKafkaTLSFiles(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	yaml := fmt.Sprintf(`
adapters:
  gone: {type: kafka, brokers: ["k:9092"], topic: t, tls: {ca_file: /nonexistent/ca.pem}}
  junk: {type: kafka, brokers: ["k:9092"], topic: t, tls: {ca_file: %s}}
  plain: {type: kafka, brokers: ["k:9092"], topic: t, tls: {}}
routes:
  a: {adapter: gone}
  b: {adapter: junk}
  c: {adapter: plain}
`, ca)
	cfg, err := Parse("c.yaml", []byte(strings.TrimPrefix(yaml, "\n")), LoadOptions{Check: true})
	if err != nil {
		t.Fatalf("check mode: %v", err)
	}
	if len(cfg.Warnings) != 2 || !strings.Contains(cfg.Warnings[0], "adapters.gone.tls: on this machine, tls.ca_file: open /nonexistent/ca.pem") ||
		!strings.Contains(cfg.Warnings[1], "adapters.junk.tls: on this machine, tls.ca_file: no PEM certificate found in "+ca) ||
		!strings.Contains(cfg.Warnings[1], "drainer run would refuse to start the adapter") {
		t.Errorf("warnings %q, want one for each unreadable CA file", cfg.Warnings)
	}
}
