package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDetectValidation(t *testing.T) {
	cases := []struct {
		name, route string
		want        string // "" = valid
	}{
		{"valid", `{adapter: p, class: non_idempotent, detect: {url: "http://p/effects/{key}?tool={tool_name}", timeout: 2s}}`, ""},
		{"only non_idempotent", `{adapter: p, detect: {url: "http://p/effects/{key}"}}`, `c.yaml:4:30: routes.wire.detect: detect is for non_idempotent routes`},
		{"unknown variable", `{adapter: p, class: non_idempotent, detect: {url: "http://p/{step_id}"}}`, `routes.wire.detect.url: unknown URL variable {step_id}`},
		{"relative url", `{adapter: p, class: non_idempotent, detect: {url: "/effects/{key}"}}`, `routes.wire.detect.url: must be an absolute http:// or https:// URL`},
		{"no url", `{adapter: p, class: non_idempotent, detect: {timeout: 2s}}`, `routes.wire.detect.url`},
		{"inline secret header", `{adapter: p, class: non_idempotent, detect: {url: "http://p/{key}", headers: {Authorization: "Bearer abc"}}}`, `secret values must come from`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			yaml := "adapters:\n  p: {type: http, url: \"http://p/{tool_name}\"}\nroutes:\n  wire: " + c.route + "\n"
			cfg, err := Parse("c.yaml", []byte(yaml), LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }})
			if c.want == "" {
				if err != nil {
					t.Fatalf("valid detect rejected: %v", err)
				}
				if r := cfg.Routes["wire"]; !r.Detect.Enabled() || r.Detect.Timeout.String() != "2s" {
					t.Fatalf("detect not loaded: %+v", r.Detect)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestRetentionConfig(t *testing.T) {
	base := "adapters:\n  p: {type: http, url: \"http://p/{tool_name}\", key_ttl: 72h}\nroutes:\n  t: {adapter: p}\n"
	cfg, err := Parse("c.yaml", []byte(base), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := cfg.Retention; !r.IsEnabled() || r.Succeeded != DefaultRetainSucceeded || r.Audit != DefaultRetainAudit || r.BatchSize != DefaultRetentionBatch {
		t.Fatalf("defaults not applied: %+v", r)
	}
	_, err = Parse("c.yaml", []byte(base+"retention:\n  succeeded: -1h\n  tombstones: 24h\n  batch_size: 0\n"), LoadOptions{})
	for _, want := range []string{"c.yaml:6:14: retention.succeeded", "c.yaml:7:15: retention.tombstones: tombstones (24h) must be kept at least as long as the longest key_ttl (72h, adapters.p.key_ttl)", "c.yaml:8:15: retention.batch_size"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want %q", err, want)
		}
	}
}

// TestTombstonesOutliveDefaultKeyTTLs: an adapter without a key_ttl of its
// own has its type's default, and tombstones must outlive that too, in
// `drainer check` and `drainer run` alike; by default they do (a kafka
// adapter's default is 7d).
func TestTombstonesOutliveDefaultKeyTTLs(t *testing.T) {
	http := "adapters:\n  p: {type: http, url: \"http://p/{tool_name}\"}\nroutes:\n  t: {adapter: p}\n"
	for _, check := range []bool{true, false} {
		_, err := Parse("c.yaml", []byte(http+"retention:\n  tombstones: 3s\n"), LoadOptions{Check: check})
		want := "c.yaml:6:15: retention.tombstones: tombstones (3s) must be kept at least as long as the longest key_ttl (24h, the http default of adapters.p)"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("check %v: got %v, want %q", check, err, want)
		}
	}
	routed := http + "  u: {adapter: p, key_ttl: 36h}\nretention:\n  tombstones: 30h\n"
	if _, err := Parse("c.yaml", []byte(routed), LoadOptions{}); err == nil || !strings.Contains(err.Error(), "(36h, routes.u.key_ttl)") {
		t.Errorf("a route's key_ttl: got %v", err)
	}
	kafka := "adapters:\n  k: {type: kafka, brokers: [\"k:9092\"], topic: orders}\nroutes:\n  t: {adapter: k}\n"
	cfg, err := Parse("c.yaml", []byte(kafka), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := 8 * 24 * time.Hour; cfg.Retention.Tombstones != want {
		t.Errorf("default tombstones beside a kafka adapter: %s, want %s (its 7d default key_ttl + 24h)", cfg.Retention.Tombstones, want)
	}
	if _, err := Parse("c.yaml", []byte(kafka+"retention:\n  tombstones: 48h\n"), LoadOptions{}); err == nil || !strings.Contains(err.Error(), "(168h, the kafka default of adapters.k)") {
		t.Errorf("tombstones shorter than kafka's default key_ttl: got %v", err)
	}
}

// TestConsoleOffLoopbackIsWarnedOf: the console's reads need no token, so
// an address off loopback is warned of (payloads, responses and audit
// trails are readable by whoever reaches it); loopback is not.
func TestConsoleOffLoopbackIsWarnedOf(t *testing.T) {
	base := "adapters:\n  p: {type: http, url: \"http://p/{tool_name}\"}\nroutes:\n  t: {adapter: p}\n"
	cfg, err := Parse("c.yaml", []byte(base+"console:\n  addr: 0.0.0.0:9754\n"), LoadOptions{Check: true})
	if err != nil {
		t.Fatal(err)
	}
	want := `c.yaml:6:3: console.addr: "0.0.0.0:9754" is not a loopback address: whoever reaches it reads every row's payload, response and audit trail (reads need no token; only actions do): keep the console on loopback, or behind a proxy that authenticates`
	if len(cfg.Warnings) != 1 || cfg.Warnings[0] != want {
		t.Errorf("warnings %q, want %q", cfg.Warnings, want)
	}
	for _, addr := range []string{"127.0.0.1:9754", "localhost:9754", "[::1]:9754"} {
		cfg, err := Parse("c.yaml", []byte(base+"console:\n  addr: \""+addr+"\"\n"), LoadOptions{Check: true})
		if err != nil || len(cfg.Warnings) != 0 {
			t.Errorf("%s: %v, warnings %q", addr, err, cfg.Warnings)
		}
	}
}

// TestDetectThatCannotRunAfterATimeoutIsWarnedOf: the probe runs within the
// lease after the attempt; a lease that leaves it no room after a timeout
// is warned of, with what is left and what it needs.
func TestDetectThatCannotRunAfterATimeoutIsWarnedOf(t *testing.T) {
	parse := func(lease string) []string {
		t.Helper()
		yaml := "lease: " + lease + "\nadapters:\n  p: {type: http, url: \"http://p/{tool_name}\", timeout: 10s}\n" +
			"routes:\n  wire: {adapter: p, class: non_idempotent, detect: {url: \"http://p/effects/{key}\", timeout: 10s, settle: 5s}}\n"
		cfg, err := Parse("c.yaml", []byte(yaml), LoadOptions{Check: true})
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Warnings
	}
	want := `c.yaml:5:45: routes.wire.detect: after an attempt that timed out, the lease (16s) leaves 0s for the probe, less than its settle and timeout (15s): such rows park as outcome_unknown unprobed; set a longer lease or a shorter timeout`
	if w := parse("16s"); len(w) != 1 || w[0] != want {
		t.Errorf("lease 16s: warnings %q, want %q", w, want)
	}
	if w := parse("31s"); len(w) != 0 {
		t.Errorf("lease 31s leaves the probe 15s: warnings %q, want none", w)
	}
}

// TestSettingsThatDoNothingAreWarnedOf: a gateway with no route to an mcp
// adapter serves no tool, and a route that is its own compensation undoes
// itself by calling itself: both are told, neither refused; a gateway in
// front of an mcp route and a route compensated by another say nothing.
func TestSettingsThatDoNothingAreWarnedOf(t *testing.T) {
	cfg, err := Parse("c.yaml", []byte(`adapters:
  p: {type: http, url: "http://p/{tool_name}"}
routes:
  x: {adapter: p, compensation: x}
gateway:
  addr: 127.0.0.1:7000
`), LoadOptions{Check: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`c.yaml:4:19: routes.x.compensation: is the route's own tool: its undo calls x again, with the forward call's key, payload and answer as its payload (forward_key, forward_payload, forward_response)`,
		`c.yaml:6:3: gateway.addr: no route sends to an adapter of type mcp: the gateway would serve no tool (drainer_abort_run only, with abort_tool: true)`,
	}
	if !slices.Equal(cfg.Warnings, want) {
		t.Errorf("warnings %q, want %q", cfg.Warnings, want)
	}
	cfg, err = Parse("c.yaml", []byte(`adapters:
  m: {type: mcp, url: "http://m/mcp"}
routes:
  x: {adapter: m, compensation: y}
  y: {adapter: m}
gateway:
  addr: 127.0.0.1:7000
`), LoadOptions{Check: true})
	if err != nil || len(cfg.Warnings) != 0 {
		t.Errorf("a gateway in front of mcp routes: %v, warnings %q", err, cfg.Warnings)
	}
}
