package config

import (
	"testing"
)

// TestParseErrors checks the exact messages, lines and columns of bad
// configs. Each YAML starts at line 1 (see parse).
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{
			name: "unknown field at top level",
			yaml: `
workerz: 16
lease: 30s
`,
			want: []string{`c.yaml:1:1: workerz: unknown field; did you mean "workers"?`},
		},
		{
			name: "unknown field without a close match lists the valid ones",
			yaml: `
colour: blue
`,
			want: []string{`c.yaml:1:1: colour: unknown field; valid fields: adapters, alerts, console, database_url, databases, gateway, lease, max_in_flight_bytes, retention, routes, unrouted_recheck, workers`},
		},
		{
			name: "console token inline",
			yaml: `
console:
  actions: true
  token: hunter2
`,
			want: []string{`c.yaml:3:10: console.token: secret values must come from ${env:NAME} or ${file:/path}, not the config text`},
		},
		{
			name: "console actions without a token",
			yaml: `
console:
  addr: 127.0.0.1:9754
  actions: true
`,
			want: []string{`c.yaml:3:12: console.actions: actions need console.token (from ${env:NAME} or ${file:/path})`},
		},
		{
			name: "gateway token inline",
			yaml: `
gateway:
  addr: 127.0.0.1:8790
  token: hunter2
`,
			want: []string{`c.yaml:3:10: gateway.token: secret values must come from ${env:NAME} or ${file:/path}, not the config text`},
		},
		{
			name: "gateway off loopback without a token",
			yaml: `
gateway:
  addr: 0.0.0.0:8790
  wait: 0s
`,
			want: []string{
				`c.yaml:2:9: gateway.addr: "0.0.0.0:8790" is not a loopback address: set gateway.token (from ${env:NAME} or ${file:/path}); every request must then carry it as a bearer token`,
				`c.yaml:3:9: gateway.wait: must be positive, got "0s"`,
			},
		},
		{
			name: "unknown field in an adapter",
			yaml: `
adapters:
  payments:
    type: http
    url: http://payments/{tool_name}
    timout: 10s
routes:
  charge_card: {adapter: payments}
`,
			want: []string{`c.yaml:5:5: adapters.payments.timout: unknown field; did you mean "timeout"?`},
		},
		{
			name: "unknown field in a route",
			yaml: `
adapters:
  payments: {type: http, url: "http://payments/{tool_name}"}
routes:
  charge_card:
    adapter: payments
    max_atempts: 3
`,
			want: []string{`c.yaml:6:5: routes.charge_card.max_atempts: unknown field; did you mean "max_attempts"?`},
		},
		{
			name: "unknown field nested in backoff",
			yaml: `
adapters:
  payments: {type: http, url: "http://payments/{tool_name}"}
routes:
  charge_card:
    adapter: payments
    backoff:
      base: 1s
      jitter: full
`,
			want: []string{`c.yaml:8:7: routes.charge_card.backoff.jitter: unknown field; valid fields: base, cap, max_retry_after`},
		},
		{
			name: "field of another adapter type",
			yaml: `
adapters:
  events:
    type: nats
    url: http://example.com/
    servers: [nats://n:4222]
    subject: events
routes:
  t: {adapter: events}
`,
			want: []string{`c.yaml:4:5: adapters.events.url: field url is not valid for adapter type nats (only for http, mcp)`},
		},
		{
			name: "string for workers",
			yaml: `
workers: many
`,
			want: []string{`c.yaml:1:10: workers: must be an integer, got "many"`},
		},
		{
			name: "list for headers",
			yaml: `
adapters:
  payments:
    type: http
    url: http://payments/{tool_name}
    headers: [Authorization, X-Tenant]
routes:
  t: {adapter: payments}
`,
			want: []string{`c.yaml:5:14: adapters.payments.headers: must be a mapping of names to values, got a list`},
		},
		{
			name: "mapping for a string",
			yaml: `
adapters:
  payments:
    type: {name: http}
`,
			want: []string{`c.yaml:3:11: adapters.payments.type: must be a string, got a mapping`},
		},
		{
			name: "type errors",
			yaml: `
workers: 99999999999999999999999
lease: [30s]
adapters:
  p:
    type: http
    url: http://p/{tool_name}
    max_concurrency: 1.5
    headers: "Authorization: x"
    breaker: 5
routes:
  t: {adapter: p, critical: 1}
`,
			want: []string{
				`c.yaml:1:10: workers: integer "99999999999999999999999" is out of range`,
				`c.yaml:2:8: lease: must be a duration, got a list`,
				`c.yaml:7:22: adapters.p.max_concurrency: must be an integer, got "1.5"`,
				`c.yaml:8:14: adapters.p.headers: must be a mapping of names to values, got a string`,
				`c.yaml:9:14: adapters.p.breaker: must be a mapping, got a number`,
				`c.yaml:11:29: routes.t.critical: must be true or false, got "1"`,
			},
		},
		{
			name: "bad durations",
			yaml: `
lease: 1w
unrouted_recheck: 15
adapters:
  p:
    type: http
    url: http://p/{tool_name}
    timeout: soon
routes:
  t: {adapter: p}
`,
			want: []string{
				`c.yaml:1:8: lease: invalid duration "1w": units are ns, us, ms, s, m, h and d (write weeks and years as days, e.g. "14d")`,
				`c.yaml:2:19: unrouted_recheck: must be a duration with a unit, like "10s", got "15"`,
				`c.yaml:7:14: adapters.p.timeout: invalid duration "soon": write a duration like "30s", "10m", "1h30m" or "7d"`,
			},
		},
		{
			name: "negative and zero durations",
			yaml: `
lease: -30s
adapters:
  p:
    type: http
    url: http://p/{tool_name}
    timeout: 0s
    breaker: {open_for: -1m}
    key_ttl: 30s
routes:
  t:
    adapter: p
    backoff: {base: 0s, cap: -1s, max_retry_after: -1h}
    reclaim_hold: -5s
`,
			want: []string{
				`c.yaml:1:8: lease: must be positive, got "-30s"`,
				`c.yaml:6:14: adapters.p.timeout: must be positive, got "0s"`,
				`c.yaml:7:25: adapters.p.breaker.open_for: must be positive, got "-1m"`,
				`c.yaml:8:14: adapters.p.key_ttl: must exceed 1m (a key_idempotent row stops being sent 1m before its key expires), got "30s"`,
				`c.yaml:12:21: routes.t.backoff.base: must be positive, got "0s"`,
				`c.yaml:12:30: routes.t.backoff.cap: must be positive, got "-1s"`,
				`c.yaml:12:52: routes.t.backoff.max_retry_after: must not be negative, got "-1h"`,
				`c.yaml:13:19: routes.t.reclaim_hold: must not be negative, got "-5s"`,
			},
		},
		{
			name: "bad rate limits",
			yaml: `
adapters:
  a: {type: http, url: "http://a/{tool_name}", rate_limit: 100/d}
  b: {type: http, url: "http://b/{tool_name}", rate_limit: 0/s}
  c: {type: http, url: "http://c/{tool_name}", rate_limit: 100}
routes:
  ta: {adapter: a}
  tb: {adapter: b}
  tc: {adapter: c}
`,
			want: []string{
				`c.yaml:2:60: adapters.a.rate_limit: invalid rate limit "100/d": write N/s, N/m or N/h, e.g. "100/s"`,
				`c.yaml:3:60: adapters.b.rate_limit: rate limit must be positive, got "0/s"`,
				`c.yaml:4:60: adapters.c.rate_limit: invalid rate limit "100": write N/s, N/m or N/h, e.g. "100/s"`,
			},
		},
		{
			name: "sizes",
			yaml: `
max_in_flight_bytes: 12MB
`,
			want: []string{`c.yaml:1:22: max_in_flight_bytes: must be a size like 32MiB (bytes, or KiB, MiB or GiB), got "12MB"`},
		},
		{
			name: "a size below the least",
			yaml: `
max_in_flight_bytes: 4096
`,
			want: []string{`c.yaml:1:22: max_in_flight_bytes: must be at least 64KiB (a row larger than it still goes out, one at a time), got "4096"`},
		},
		{
			name: "out-of-range numbers",
			yaml: `
workers: 5000
adapters:
  p:
    type: http
    url: http://p/{tool_name}
    max_concurrency: 0
    breaker: {consecutive_failures: -1}
routes:
  t: {adapter: p, max_attempts: 0}
`,
			want: []string{
				`c.yaml:1:10: workers: must be between 1 and 4096, got "5000"`,
				`c.yaml:6:22: adapters.p.max_concurrency: must be at least 1 when set, got "0"`,
				`c.yaml:7:37: adapters.p.breaker.consecutive_failures: must be 0 (breaker disabled) or more, got "-1"`,
				`c.yaml:9:33: routes.t.max_attempts: must be at least 1, got "0"`,
			},
		},
		{
			name: "unknown adapter type",
			yaml: `
adapters:
  events:
    type: rabbitmq
routes:
  t: {adapter: events}
`,
			want: []string{`c.yaml:3:11: adapters.events.type: unknown adapter type "rabbitmq"; valid types: http, kafka, mcp, nats, plugin, postgres, river, stripe`},
		},
		{
			name: "adapter without type, route without adapter",
			yaml: `
adapters:
  events:
    timeout: 5s
routes:
  t:
    class: key_idempotent
  u:
`,
			want: []string{
				`c.yaml:2:3: adapters.events.type: required field is missing`,
				`c.yaml:5:3: routes.t.adapter: required field is missing`,
				`c.yaml:7:3: routes.u.adapter: required field is missing`,
			},
		},
		{
			// The type-independent checks still apply to an adapter whose
			// type is unknown or missing: a secret is never inline, and a
			// key every type declares alike is read as they declare it.
			name: "unknown or missing adapter type hides no other error",
			yaml: `
adapters:
  a:
    type: htttp
    url: http://a/{tool_name}
    headers: {Authorization: "Bearer inline-secret", X-Tenant: t, X-Api-Key: "${env:PAYMENTS_TOKEN}"}
  b:
    headers: {Authorization: "Bearer inline-secret"}
    dsn: postgres://u:pw@db/app
  c:
    type: kafak
    brokers: ["k:9092"]
    sasl: {mechanism: PLAIN, username: u, password: inline}
  d:
    type: nope
    headers: 5
routes:
  t1: {adapter: a}
  t2: {adapter: b}
  t3: {adapter: c}
  t4: {adapter: d}
`,
			want: []string{
				`c.yaml:3:11: adapters.a.type: unknown adapter type "htttp"; valid types: http, kafka, mcp, nats, plugin, postgres, river, stripe`,
				`c.yaml:5:30: adapters.a.headers.Authorization: secret values must come from ${env:NAME} or ${file:/path}, not the config text`,
				`c.yaml:6:3: adapters.b.type: required field is missing`,
				`c.yaml:7:30: adapters.b.headers.Authorization: secret values must come from ${env:NAME} or ${file:/path}, not the config text`,
				`c.yaml:8:10: adapters.b.dsn: secret values must come from ${env:NAME} or ${file:/path}, not the config text`,
				`c.yaml:10:11: adapters.c.type: unknown adapter type "kafak"; valid types: http, kafka, mcp, nats, plugin, postgres, river, stripe`,
				`c.yaml:12:53: adapters.c.sasl.password: secret values must come from ${env:NAME} or ${file:/path}, not the config text`,
				`c.yaml:14:11: adapters.d.type: unknown adapter type "nope"; valid types: http, kafka, mcp, nats, plugin, postgres, river, stripe`,
				`c.yaml:15:14: adapters.d.headers: must be a mapping of names to values, got a number`,
			},
		},
		{
			name: "route to a missing adapter",
			yaml: `
adapters:
  payments: {type: http, url: "http://p/{tool_name}"}
  backup: {type: http, url: "http://b/{tool_name}"}
routes:
  charge_card: {adapter: paymnts}
  refund_card: {adapter: ledger}
`,
			want: []string{
				`c.yaml:5:26: routes.charge_card.adapter: unknown adapter "paymnts" (did you mean "payments"?); configured adapters: backup, payments`,
				`c.yaml:6:26: routes.refund_card.adapter: unknown adapter "ledger"; configured adapters: backup, payments`,
			},
		},
		{
			name: "route to an adapter when none is configured",
			yaml: `
routes:
  charge_card: {adapter: payments}
`,
			want: []string{`c.yaml:2:26: routes.charge_card.adapter: unknown adapter "payments"; no adapters are configured`},
		},
		{
			name: "compensation naming a missing route",
			yaml: `
adapters:
  payments: {type: http, url: "http://p/{tool_name}"}
routes:
  charge_card:
    adapter: payments
    compensation: refund_crd
  refund_card: {adapter: payments}
`,
			want: []string{`c.yaml:6:19: routes.charge_card.compensation: no route for tool "refund_crd" (did you mean "refund_card"?); configured routes: charge_card, refund_card`},
		},
		{
			name: "fallback on a non_idempotent route",
			yaml: `
adapters:
  payments: {type: http, url: "http://p/{tool_name}"}
  backup: {type: http, url: "http://b/{tool_name}"}
routes:
  transfer:
    adapter: payments
    class: non_idempotent
    critical: false
    fallback: backup
`,
			want: []string{`c.yaml:9:15: routes.transfer.fallback: a fallback is not allowed on a non_idempotent route: the first adapter may have had the effect`},
		},
		{
			name: "fallback with critical true or unset",
			yaml: `
adapters:
  payments: {type: http, url: "http://p/{tool_name}"}
  backup: {type: http, url: "http://b/{tool_name}"}
routes:
  a: {adapter: payments, critical: true, fallback: backup}
  b: {adapter: payments, fallback: backup}
`,
			want: []string{
				`c.yaml:5:52: routes.a.fallback: a fallback needs critical: false (a critical route's failure aborts its run)`,
				`c.yaml:6:36: routes.b.fallback: a fallback needs critical: false (a critical route's failure aborts its run)`,
			},
		},
		{
			name: "fallback to a missing or the same adapter",
			yaml: `
adapters:
  payments: {type: http, url: "http://p/{tool_name}"}
routes:
  a: {adapter: payments, critical: false, fallback: backup}
  b: {adapter: payments, critical: false, fallback: payments}
`,
			want: []string{
				`c.yaml:4:53: routes.a.fallback: unknown adapter "backup"; configured adapters: payments`,
				`c.yaml:5:53: routes.b.fallback: must differ from the route's adapter`,
			},
		},
		{
			name: "bad enums and alert adapter",
			yaml: `
alerts: {compensation_failed: pagerr}
adapters:
  pager: {type: http, url: "http://p/{tool_name}"}
routes:
  t: {adapter: pager, class: idempotent, ordering: fifo, critical: maybe}
`,
			want: []string{
				`c.yaml:1:31: alerts.compensation_failed: unknown adapter "pagerr" (did you mean "pager"?); configured adapters: pager`,
				`c.yaml:5:30: routes.t.class: must be one of naturally_idempotent, key_idempotent, non_idempotent, got "idempotent"`,
				`c.yaml:5:52: routes.t.ordering: must be one of none, business_scope, got "fifo"`,
				`c.yaml:5:68: routes.t.critical: must be true or false, got "maybe"`,
			},
		},
		{
			name: "lease too short, lease written",
			yaml: `
lease: 30s
adapters:
  slow:
    type: http
    url: http://slow/{tool_name}
    timeout: 25s
routes:
  t: {adapter: slow}
`,
			want: []string{`c.yaml:1:8: lease: lease 30s must exceed the timeout of adapter slow (25s) plus 5s`},
		},
		{
			name: "lease too short, lease default",
			yaml: `
adapters:
  slow:
    type: http
    url: http://slow/{tool_name}
    timeout: 1m
routes:
  t: {adapter: slow}
`,
			want: []string{`c.yaml:5:14: adapters.slow.timeout: timeout 1m plus 5s must be less than the lease (30s by default); lower the timeout or set a longer lease`},
		},
		{
			name: "backoff cap below base",
			yaml: `
adapters:
  p: {type: http, url: "http://p/{tool_name}"}
routes:
  a: {adapter: p, backoff: {base: 2s, cap: 1s}}
  b: {adapter: p, backoff: {base: 1h}}
`,
			want: []string{
				`c.yaml:4:44: routes.a.backoff.cap: cap 1s must be at least base 2s`,
				`c.yaml:5:35: routes.b.backoff.base: base 1h must not exceed cap (10m by default)`,
			},
		},
		{
			name: "inline secrets",
			yaml: `
database_url: postgres://drainer:hunter2@db/drainer
adapters:
  p:
    type: http
    url: https://user:pw@p/{tool_name}
    headers:
      Authorization: Bearer abc123
      X-Api-Key: "12345"
      Cookie: session=1
      X-Tenant: acme
  s: {type: stripe, api_key: sk_live_1}
  db: {type: postgres, dsn: "host=db password=pw", table: events}
routes:
  a: {adapter: p}
  b: {adapter: s}
  c: {adapter: db}
`,
			want: []string{
				`c.yaml:1:15: database_url: secret values must come from ${env:NAME} or ${file:/path}, not the config text`,
				`c.yaml:5:10: adapters.p.url: must not contain userinfo; send credentials in headers`,
				`c.yaml:7:22: adapters.p.headers.Authorization: secret values must come from ${env:NAME} or ${file:/path}, not the config text`,
				`c.yaml:8:18: adapters.p.headers.X-Api-Key: secret values must come from ${env:NAME} or ${file:/path}, not the config text`,
				`c.yaml:9:15: adapters.p.headers.Cookie: secret values must come from ${env:NAME} or ${file:/path}, not the config text`,
				`c.yaml:11:30: adapters.s.api_key: secret values must come from ${env:NAME} or ${file:/path}, not the config text`,
				`c.yaml:12:29: adapters.db.dsn: secret values must come from ${env:NAME} or ${file:/path}, not the config text`,
			},
		},
		{
			name: "unset env and reference syntax",
			yaml: `
database_url: ${env:NOT_SET}
adapters:
  p:
    type: http
    url: http://p/{tool_name}
    headers:
      Authorization: Bearer ${vault:payments}
      X-Token: ${env:TOKEN
      X-Key: ${file:relative/path}
      X-Other: ${env:1BAD}
      X-Secret: ${TOKEN}
routes:
  t: {adapter: p}
`,
			want: []string{
				`c.yaml:1:15: database_url: environment variable NOT_SET is not set (${env:NOT_SET})`,
				`c.yaml:7:22: adapters.p.headers.Authorization: unknown reference scheme "vault" in ${vault:payments}; use ${env:NAME} or ${file:/path}`,
				`c.yaml:8:16: adapters.p.headers.X-Token: unterminated "${" (a reference ends with "}"; write "$${" for a literal "${")`,
				`c.yaml:9:14: adapters.p.headers.X-Key: ${file:relative/path} must name an absolute path`,
				`c.yaml:10:16: adapters.p.headers.X-Other: invalid environment variable name in ${env:1BAD}`,
				`c.yaml:11:17: adapters.p.headers.X-Secret: reference ${TOKEN} has no scheme; use ${env:NAME} or ${file:/path}`,
			},
		},
		{
			name: "http URL template",
			yaml: `
adapters:
  a: {type: http, url: "http://a/{tool}"}
  b: {type: http, url: "/relative/{tool_name}"}
  c: {type: http, url: "ftp://c/{tool_name}"}
  d: {type: http, url: "http://{tool_name}.svc/"}
  e: {type: http, url: "http://e/{tool_name"}
  f: {type: http}
routes:
  ta: {adapter: a}
  tb: {adapter: b}
  tc: {adapter: c}
  td: {adapter: d}
  te: {adapter: e}
  tf: {adapter: f}
`,
			want: []string{
				`c.yaml:2:24: adapters.a.url: unknown URL variable {tool}; {tool_name} is the only one`,
				`c.yaml:3:24: adapters.b.url: must be an absolute http:// or https:// URL`,
				`c.yaml:4:24: adapters.c.url: must be an absolute http:// or https:// URL`,
				`c.yaml:5:24: adapters.d.url: {tool_name} may appear only in the URL's path or query`,
				`c.yaml:6:24: adapters.e.url: unbalanced { or } in the URL; {tool_name} is the only variable`,
				`c.yaml:7:3: adapters.f.url: required field is missing`,
			},
		},
		{
			name: "headers",
			yaml: `
adapters:
  p:
    type: http
    url: http://p/{tool_name}
    headers:
      Idempotency-Key: ${env:PAYMENTS_TOKEN}
      X-Tenant: acme
      x-tenant: other
      "Bad Header": x
routes:
  t: {adapter: p}
`,
			want: []string{
				`c.yaml:6:7: adapters.p.headers.Idempotency-Key: header Idempotency-Key is set by drainer on every request and cannot be configured`,
				`c.yaml:8:7: adapters.p.headers.x-tenant: header x-tenant is also configured as X-Tenant (header names are case-insensitive)`,
				`c.yaml:9:7: adapters.p.headers.Bad Header: "Bad Header" is not a valid header name (letters, digits and !#$%&'*+-.^_` + "`" + `|~ only)`,
			},
		},
		{
			name: "adapter type fields",
			yaml: `
adapters:
  s: {type: stripe, stripe_version: latest, base_url: "localhost:1"}
  pg: {type: postgres, table: "a.b.c"}
  rv: {type: river, dsn: "host=db", job_kind: "", queue: Bad_Queue, schema: "my schema"}
  n: {type: nats, servers: [], subject: "a.>", stream: "a.b"}
  n2: {type: nats, servers: ["http://x"]}
  pl: {type: plugin, command: bin/adapter, sha256: ABC}
  "bad name": {type: plugin, command: /bin/true}
routes:
  t1: {adapter: s}
  t2: {adapter: pg}
  t3: {adapter: rv}
  t4: {adapter: n}
  t5: {adapter: n2}
  t6: {adapter: pl}
  t7: {adapter: bad name}
`,
			want: []string{
				`c.yaml:2:3: adapters.s.api_key: required field is missing`,
				`c.yaml:2:37: adapters.s.stripe_version: must be a Stripe API version like "2024-06-20", got "latest"`,
				`c.yaml:2:55: adapters.s.base_url: must be an absolute http:// or https:// URL`,
				`c.yaml:3:3: adapters.pg.dsn: required field is missing`,
				`c.yaml:3:31: adapters.pg.table: must be a table name, optionally schema-qualified ("effects" or "app.effects"; letters, digits, _ and $), got "a.b.c"`,
				`c.yaml:4:47: adapters.rv.job_kind: must not be empty (leave it out for drainer_intent)`,
				`c.yaml:4:58: adapters.rv.queue: must be a River queue name (at most 64 lower-case letters and digits, separated by _, - or |), got "Bad_Queue"`,
				`c.yaml:4:77: adapters.rv.schema: must be a schema name River accepts (a plain identifier of at most 46 letters, digits and _), got "my schema"`,
				`c.yaml:5:28: adapters.n.servers: must list at least one server`,
				`c.yaml:5:41: adapters.n.subject: must be a NATS subject to publish to: "a.>": wildcards cannot be published to`,
				`c.yaml:5:56: adapters.n.stream: must be a JetStream stream name (no whitespace, ".", "*", ">", "/" or "\"), got "a.b"`,
				`c.yaml:6:3: adapters.n2.subject: required field is missing`,
				`c.yaml:6:30: adapters.n2.servers[0]: must be a server URL like nats://host:4222 (schemes nats, tls, ws, wss)`,
				`c.yaml:7:31: adapters.pl.command: must be an absolute path, got "bin/adapter"`,
				`c.yaml:7:52: adapters.pl.sha256: must be 64 lower-case hex digits (the output of sha256sum)`,
				`c.yaml:8:3: adapters.bad name: adapter names are letters, digits, '_', '-' and '.', starting with a letter or digit`,
			},
		},
		{
			name: "null in a list",
			yaml: `
adapters:
  n:
    type: nats
    servers: [nats://a:4222, ~]
    subject: s
routes:
  t: {adapter: n}
`,
			want: []string{`c.yaml:4:30: adapters.n.servers[1]: must be a string, got null`},
		},
		{
			name: "YAML syntax error",
			yaml: `
workers: 16
adapters: [1, 2
lease: 30s
`,
			want: []string{`c.yaml:3:1: invalid YAML: ',' or ']' must be specified`},
		},
		{
			name: "duplicate key",
			yaml: `
workers: 16
workers: 8
`,
			want: []string{`c.yaml:2:1: invalid YAML: mapping key "workers" already defined at [1:1]`},
		},
		{
			name: "top level is not a mapping",
			yaml: `
- workers: 16
`,
			want: []string{`c.yaml:1:1: the top level must be a mapping of settings (workers: 16 …), got a list`},
		},
		{
			name: "two documents",
			yaml: `
workers: 16
---
workers: 8
`,
			want: []string{`c.yaml:3:1: a config file holds one YAML document; remove the second one`},
		},
		{
			name: "aliases and tags",
			yaml: `
workers: *nope
lease: !duration 30s
adapters:
  a: &loop {type: http, url: "http://a/{tool_name}", <<: *loop}
`,
			want: []string{
				`c.yaml:1:10: workers: unknown alias *nope`,
				`c.yaml:2:8: lease: unsupported YAML tag !duration`,
				`c.yaml:4:12: adapters.a: merge keys nest too deep (does a mapping merge itself?)`,
			},
		},
		{
			// Credential headers by name (auth, secret, token, key, password,
			// signature, session, cookie, credential; not author nor the
			// idempotency key's), and query parameters named like a
			// credential, in a URL or a route's query: inline values are
			// refused, named by field and parameter, never quoted.
			name: "credentials inline in headers and query parameters",
			yaml: `
adapters:
  h:
    type: http
    url: "http://h/{tool_name}?page=2&api_key=sekrit"
    headers: {X-Auth: zzz, X-Session-Id: abc, X-Hub-Signature: s, X-Tenant: t, X-Author: me, X-Idempotency-Key: k, X-Token: "${env:PAYMENTS_TOKEN}"}
  ok: {type: http, url: "http://o/{tool_name}?api_key=${env:PAYMENTS_TOKEN}&sort_key=name&sig={tool_name}"}
  m: {type: mcp, url: "https://m/mcp?token=sekrit"}
routes:
  t1: {adapter: h, query: {access_key: sekrit, format: json}}
  t2: {adapter: ok, query: {api_key: "${env:PAYMENTS_TOKEN}"}}
  t3: {adapter: m}
  t4: {adapter: h, class: non_idempotent, detect: {url: "http://h/{key}?X-Amz-Signature=sekrit"}}
`,
			want: []string{
				`c.yaml:4:10: adapters.h.url: query parameter "api_key": secret values must come from ${env:NAME} or ${file:/path}, not the config text`,
				`c.yaml:5:23: adapters.h.headers.X-Auth: secret values must come from ${env:NAME} or ${file:/path}, not the config text`,
				`c.yaml:5:42: adapters.h.headers.X-Session-Id: secret values must come from ${env:NAME} or ${file:/path}, not the config text`,
				`c.yaml:5:64: adapters.h.headers.X-Hub-Signature: secret values must come from ${env:NAME} or ${file:/path}, not the config text`,
				`c.yaml:7:23: adapters.m.url: query parameter "token": secret values must come from ${env:NAME} or ${file:/path}, not the config text`,
				`c.yaml:9:40: routes.t1.query.access_key: secret values must come from ${env:NAME} or ${file:/path}, not the config text`,
				`c.yaml:12:57: routes.t4.detect.url: query parameter "X-Amz-Signature": secret values must come from ${env:NAME} or ${file:/path}, not the config text`,
			},
		},
		{
			name: "several errors at once, sorted by line",
			yaml: `
workers: 0
lease: 20s
adapters:
  payments:
    type: http
    url: http://payments/{tool_name}
    timeout: 20s
    timout: 1s
    headers: {Authorization: Bearer inline}
  events:
    type: nats
    url: http://x
routes:
  charge_card:
    adapter: payment
    class: maybe
    backoff: {base: 1s, cap: 10m, max_retry_after: soon}
    compensation: refund_card
`,
			want: []string{
				`c.yaml:1:10: workers: must be between 1 and 4096, got "0"`,
				`c.yaml:2:8: lease: lease 20s must exceed the timeout of adapter payments (20s) plus 5s`,
				`c.yaml:8:5: adapters.payments.timout: unknown field; did you mean "timeout"?`,
				`c.yaml:9:30: adapters.payments.headers.Authorization: secret values must come from ${env:NAME} or ${file:/path}, not the config text`,
				`c.yaml:10:3: adapters.events.servers: required field is missing`,
				`c.yaml:10:3: adapters.events.subject: required field is missing`,
				`c.yaml:12:5: adapters.events.url: field url is not valid for adapter type nats (only for http, mcp)`,
				`c.yaml:15:14: routes.charge_card.adapter: unknown adapter "payment" (did you mean "payments"?); configured adapters: events, payments`,
				`c.yaml:16:12: routes.charge_card.class: must be one of naturally_idempotent, key_idempotent, non_idempotent, got "maybe"`,
				`c.yaml:17:52: routes.charge_card.backoff.max_retry_after: invalid duration "soon": write a duration like "30s", "10m", "1h30m" or "7d"`,
				`c.yaml:18:19: routes.charge_card.compensation: no route for tool "refund_card"; configured routes: charge_card`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parse(t, tt.yaml, false)
			if err == nil {
				t.Fatalf("Parse succeeded (%s), want errors", cfg.Summary())
			}
			assertLines(t, errorLines(t, err), tt.want)
		})
	}
}
