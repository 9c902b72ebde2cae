package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestSecretNeverPrints(t *testing.T) {
	const value = "hunter2"
	s := Secret(value)
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "secret", s)
	slog.New(slog.NewTextHandler(&logs, nil)).Info("x", "secret", s)
	js, err := json.Marshal(map[string]Secret{"k": s})
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{
		fmt.Sprint(s), fmt.Sprintf("%s %v %q %+v %#v", s, s, s, s, s),
		fmt.Sprintf("%+v", struct{ S Secret }{s}), fmt.Sprintf("%#v", struct{ S Secret }{s}),
		fmt.Sprintf("%v", map[string]Secret{"Authorization": s}),
		string(js), logs.String(),
	} {
		if strings.Contains(out, value) {
			t.Errorf("secret printed: %s", out)
		}
	}
	if s.Reveal() != value {
		t.Errorf("Reveal = %q", s.Reveal())
	}
}

func TestNoSecretInMessages(t *testing.T) {
	const marker = "SECRET-7f3a"
	env := map[string]string{
		"S":        marker,
		"S_URL":    "http://" + marker + "/{bad}",
		"S_URL2":   "ftp://" + marker,
		"S_HEADER": marker + "\r\nX-Injected: 1",
		"S_TIME":   "41s",
	}
	opts := LoadOptions{
		LookupEnv: func(name string) (string, bool) { v, ok := env[name]; return v, ok },
		ReadFile:  func(string) ([]byte, error) { return []byte(marker + "\n"), nil },
	}
	const yaml = `
database_url: ${env:S}
workers: ${env:S}
lease: ${file:/s}
unrouted_recheck: ${env:S}
alerts: {compensation_failed: "${env:S}"}
adapters:
  h:
    type: http
    url: ${env:S_URL}
    timeout: ${env:S_TIME}
    rate_limit: ${env:S}
    max_concurrency: ${env:S}
    key_ttl: ${env:S}
    breaker: {consecutive_failures: "${env:S}", open_for: "${env:S}"}
    headers: {Authorization: "${env:S_HEADER}", X-Tenant: "${env:S}"}
  h2: {type: http, url: "${env:S_URL2}"}
  t: {type: "${env:S}"}
  s: {type: stripe, api_key: "${env:S}", stripe_version: "${env:S}", base_url: "${env:S}"}
  p: {type: postgres, dsn: "${env:S}", table: "${env:S}"}
  r: {type: river, dsn: "${env:S}", job_kind: "${env:S}", queue: "${env:S}", schema: "${env:S}"}
  n: {type: nats, servers: ["${env:S}"], subject: "${env:S} x", stream: "${env:S}.x"}
  x: {type: plugin, command: "${env:S}", sha256: "${env:S}"}
routes:
  a:
    adapter: ${env:S}
    class: ${env:S}
    ordering: ${env:S}
    max_attempts: ${env:S}
    critical: ${env:S}
    compensation: ${env:S}
    fallback: ${env:S}
    backoff: {base: "${env:S}", cap: "${env:S}", max_retry_after: "${env:S}"}
`
	for _, check := range []bool{false, true} {
		opts.Check = check
		_, err := Parse("c.yaml", []byte(yaml), opts)
		if err == nil {
			t.Fatal("Parse succeeded")
		}
		msgs := err.Error()
		if strings.Contains(msgs, marker) || strings.Contains(msgs, "41s") || strings.Contains(msgs, "Injected") {
			t.Errorf("a message reveals an expanded value:\n%s", msgs)
		}
		if n := strings.Count(msgs, "\n") + 1; n < 30 {
			t.Errorf("only %d errors; the test should exercise every message:\n%s", n, msgs)
		}
	}

	// Cross-field rules quote durations as written.
	opts.Check = false
	_, err := Parse("c.yaml", []byte(`
adapters:
  h: {type: http, url: "http://h/{tool_name}", timeout: "${env:S_TIME}"}
routes:
  a: {adapter: h, backoff: {base: "${env:S_TIME}", cap: 1s}}
`), opts)
	want := `c.yaml:3:57: adapters.h.timeout: timeout ${env:S_TIME} plus 5s must be less than the lease (30s by default); lower the timeout or set a longer lease
c.yaml:5:57: routes.a.backoff.cap: cap 1s must be at least base ${env:S_TIME}`
	if err == nil || err.Error() != want {
		t.Errorf("got:\n%v\nwant:\n%s", err, want)
	}

	// Warnings, and the summary of a valid config.
	opts.Check = true
	var cfg *Config
	cfg, err = Parse("c.yaml", []byte("adapters:\n  h: {type: http, url: \"http://h/{tool_name}\", headers: {X-Token: \"${env:S} ${env:UNSET}\"}}\n"), opts)
	if err != nil {
		t.Fatal(err)
	}
	if all := strings.Join(cfg.Warnings, "\n") + cfg.Summary(); strings.Contains(all, marker) {
		t.Errorf("a warning reveals an expanded value: %s", all)
	}
}

// TestReferencedValueMessages: a message about a value that came from a
// reference names the reference as "the value of" it, never the value
// itself, and does not present the reference as the value after expansion;
// a reference within other text is quoted whole.
func TestReferencedValueMessages(t *testing.T) {
	env := map[string]string{"PROBE_A_L": "1", "PROBE_N": "many", "PROBE_B": "maybe", "PROBE_BIG": "99999999999999999999"}
	opts := LoadOptions{LookupEnv: func(name string) (string, bool) { v, ok := env[name]; return v, ok }}
	for _, tt := range []struct {
		yaml string
		want string
	}{
		{"lease: ${env:PROBE_A_L}\n", `c.yaml:1:8: lease: must be a duration with a unit, like "10s", got the value of ${env:PROBE_A_L}`},
		{"lease: ${env:PROBE_A_L}y\n", `c.yaml:1:8: lease: invalid duration the value of "${env:PROBE_A_L}y": units are ns, us, ms, s, m, h and d (write weeks and years as days, e.g. "14d")`},
		{"lease: \"${env:PROBE_N}s\"\n", `c.yaml:1:8: lease: invalid duration the value of "${env:PROBE_N}s": write a duration like "30s", "10m", "1h30m" or "7d"`},
		{"workers: ${env:PROBE_N}\n", `c.yaml:1:10: workers: must be an integer, got the value of ${env:PROBE_N}`},
		{"workers: ${env:PROBE_BIG}\n", `c.yaml:1:10: workers: integer the value of ${env:PROBE_BIG} is out of range`},
		{"console: {actions: \"${env:PROBE_B}\"}\n", `c.yaml:1:20: console.actions: must be true or false, got the value of ${env:PROBE_B}`},
	} {
		t.Run(tt.yaml, func(t *testing.T) {
			for _, check := range []bool{false, true} {
				opts.Check = check
				_, err := Parse("c.yaml", []byte(tt.yaml), opts)
				if err == nil || err.Error() != tt.want {
					t.Errorf("check %v: got\n%v\nwant\n%s", check, err, tt.want)
				}
			}
		})
	}
}
