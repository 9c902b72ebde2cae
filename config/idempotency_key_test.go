package config

import (
	"github.com/drainer-io/drainer/dispatch/webhook"
	"strings"
	"testing"
	"time"
)

// TestKeyOverridesErrors checks idempotency_key (adapter and route) and
// route-level key_ttl: every problem at once, each at its line; a bad
// location hides no problem of the name.
func TestKeyOverridesErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{
			name: "adapter placement values",
			yaml: `
adapters:
  a: {type: http, url: "http://a/{tool_name}?ver=1", headers: {X-Tenant: t}, idempotency_key: {name: "X Key", location: header}}
  b: {type: http, url: "http://b/{tool_name}?ver=1", idempotency_key: {name: ver, location: query}}
  c: {type: http, url: "http://c/{tool_name}", idempotency_key: {name: k, location: cookie}}
  d: {type: http, url: "http://d/{tool_name}", idempotency_key: {location: body}}
  e: {type: http, url: "http://e/{tool_name}", idempotency_key: {name: X-Agent-Idempotency-Tuple}}
  f: {type: http, url: "http://f/{tool_name}", headers: {X-Tenant: t}, idempotency_key: {name: x-tenant}}
  g: {type: http, url: "http://g/{tool_name}", idempotency_key: {name: k, location: body, extra: 1}}
  h: {type: http, url: "http://h/{tool_name}", idempotency_key: {name: "", location: cookie}}
  i: {type: http, url: "http://i/{tool_name}", idempotency_key: {location: cookie}}
routes:
  t1: {adapter: a}
  t2: {adapter: b}
  t3: {adapter: c}
  t4: {adapter: d}
  t5: {adapter: e}
  t6: {adapter: f}
  t7: {adapter: g}
  t8: {adapter: h}
  t9: {adapter: i}
`,
			want: []string{
				"c.yaml:2:102: adapters.a.idempotency_key.name: \"X Key\" is not a valid header name (letters, digits and !#$%&'*+-.^_`|~ only)",
				`c.yaml:3:78: adapters.b.idempotency_key.name: query parameter ver is already in the adapter's url`,
				`c.yaml:4:85: adapters.c.idempotency_key.location: must be one of header, query or body, got "cookie"`,
				`c.yaml:5:48: adapters.d.idempotency_key.name: required field is missing`,
				`c.yaml:6:72: adapters.e.idempotency_key.name: header X-Agent-Idempotency-Tuple is set by drainer on every request and cannot carry the key`,
				`c.yaml:7:96: adapters.f.idempotency_key.name: header x-tenant is also configured in the adapter's headers`,
				`c.yaml:8:91: adapters.g.idempotency_key.extra: unknown field; valid fields: location, name`,
				// The name is checked whatever the location.
				`c.yaml:9:72: adapters.h.idempotency_key.name: must not be empty`,
				`c.yaml:9:86: adapters.h.idempotency_key.location: must be one of header, query or body, got "cookie"`,
				`c.yaml:10:48: adapters.i.idempotency_key.name: required field is missing`,
				`c.yaml:10:76: adapters.i.idempotency_key.location: must be one of header, query or body, got "cookie"`,
			},
		},
		{
			name: "placement on a non-http adapter and route",
			yaml: `
adapters:
  s: {type: stripe, api_key: "${env:STRIPE_KEY}", idempotency_key: {name: k, location: query}}
  h: {type: http, url: "http://h/{tool_name}"}
routes:
  charge: {adapter: s, idempotency_key: {name: k, location: query}}
  ok: {adapter: h, idempotency_key: {name: k, location: query}}
`,
			want: []string{
				`c.yaml:2:51: adapters.s.idempotency_key: field idempotency_key is not valid for adapter type stripe (only for http)`,
				`c.yaml:5:24: routes.charge.idempotency_key: idempotency_key is valid only on routes whose adapter is http; adapter s is stripe`,
			},
		},
		{
			name: "route key_ttl and route placement values",
			yaml: `
adapters:
  h: {type: http, url: "http://h/{tool_name}?ver=1", headers: {Authorization: "${env:TOKEN}"}}
routes:
  a: {adapter: h, key_ttl: 30s}
  b: {adapter: h, key_ttl: soon}
  c: {adapter: h, idempotency_key: {name: ver, location: query}}
  d: {adapter: h, idempotency_key: {name: authorization}}
  e: {adapter: h, idempotency_key: {name: "", location: body}}
  f: {adapter: h, idempotency_key: {name: "", location: cookie}}
`,
			want: []string{
				`c.yaml:4:28: routes.a.key_ttl: must exceed 1m (a key_idempotent row stops being sent 1m before its key expires), got "30s"`,
				`c.yaml:5:28: routes.b.key_ttl: invalid duration "soon": write a duration like "30s", "10m", "1h30m" or "7d"`,
				`c.yaml:6:43: routes.c.idempotency_key.name: query parameter ver is already in the adapter's url`,
				`c.yaml:7:43: routes.d.idempotency_key.name: header authorization is also configured in the adapter's headers`,
				`c.yaml:8:43: routes.e.idempotency_key.name: must not be empty`,
				`c.yaml:9:43: routes.f.idempotency_key.name: must not be empty`,
				`c.yaml:9:57: routes.f.idempotency_key.location: must be one of header, query or body, got "cookie"`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parse(t, tt.yaml, true)
			if err == nil {
				t.Fatalf("Parse succeeded (%s), want errors", cfg.Summary())
			}
			assertLines(t, errorLines(t, err), tt.want)
		})
	}
}

func TestKeyOverridesValid(t *testing.T) {
	cfg := mustParse(t, `
adapters:
  h:
    type: http
    url: "http://h/{tool_name}"
    idempotency_key: {name: X-Request-Key, location: header}
routes:
  a: {adapter: h}
  b:
    adapter: h
    key_ttl: 2h
    idempotency_key: {name: request_id, location: body}
  c: {adapter: h, idempotency_key: {name: Idempotency-Key}}
`, true)
	if k := settingsOf[webhook.Settings](t, cfg.Adapters["h"]).IdempotencyKey; k == nil || *k != (IdempotencyKey{Name: "X-Request-Key", Location: "header"}) {
		t.Errorf("adapter idempotency_key = %+v", k)
	}
	if r := cfg.Routes["b"]; r.KeyTTL != 2*time.Hour || r.IdempotencyKey == nil || *r.IdempotencyKey != (IdempotencyKey{Name: "request_id", Location: "body"}) {
		t.Errorf("route b = key_ttl %s, idempotency_key %+v", r.KeyTTL, r.IdempotencyKey)
	}
	if r := cfg.Routes["a"]; r.KeyTTL != 0 || r.IdempotencyKey != nil {
		t.Errorf("route a has overrides it did not write: %s %+v", r.KeyTTL, r.IdempotencyKey)
	}
	if cfg.Retention.Tombstones < 48*time.Hour {
		t.Errorf("tombstones %s", cfg.Retention.Tombstones)
	}
}

// TestRouteKeyTTLOutsideKeyIdempotent: a key_ttl on a route of another
// class bounds nothing; it is named as such, not refused for a key_idempotent
// row's margin.
func TestRouteKeyTTLOutsideKeyIdempotent(t *testing.T) {
	cfg := mustParse(t, `
adapters:
  h: {type: http, url: "http://h/{tool_name}"}
routes:
  a: {adapter: h, class: non_idempotent, key_ttl: 30s}
  b: {adapter: h, class: naturally_idempotent, key_ttl: 2h}
`, false)
	want := []string{
		`c.yaml:4:42: routes.a.key_ttl: has no effect on a non_idempotent route: only a key_idempotent row's sending is bounded by its key's window`,
		`c.yaml:5:48: routes.b.key_ttl: has no effect on a naturally_idempotent route: only a key_idempotent row's sending is bounded by its key's window`,
	}
	if strings.Join(cfg.Warnings, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(cfg.Warnings, "\n"), strings.Join(want, "\n"))
	}
}
