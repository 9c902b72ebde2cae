//go:build integration

package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/tern/v2/migrate"
)

// The security evidence of docs/security.md: secrets never leak, a payload
// cannot steer the request, CLI arguments never become SQL, and the
// least-privilege roles of deploy/sql/roles.sql are enough to drain,
// operate and enqueue.

// secHex returns n random bytes as lower-case hex.
func secHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// secRequest is what a provider saw of one request.
type secRequest struct {
	Method, Path, RawQuery, Host string
	Header                       http.Header
	Body                         []byte
}

// secAnswer is a provider's answer; hangUp closes the connection instead,
// once the request was read.
type secAnswer struct {
	status int
	header map[string]string
	body   string
	hangUp bool
}

// secProvider is an in-process HTTP provider that records every request and
// answers answer(request, n), n counting the requests seen so far for the
// same path and Idempotency-Key (1 for the first).
type secProvider struct {
	srv    *httptest.Server
	answer func(r secRequest, n int) secAnswer

	mu     sync.Mutex
	reqs   []secRequest
	counts map[string]int
}

func newSecProvider(t *testing.T, answer func(r secRequest, n int) secAnswer) *secProvider {
	t.Helper()
	p := &secProvider{answer: answer, counts: map[string]int{}}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		req := secRequest{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Host: r.Host, Header: r.Header.Clone(), Body: body}
		p.mu.Lock()
		p.reqs = append(p.reqs, req)
		id := r.URL.Path + " " + r.Header.Get("Idempotency-Key")
		p.counts[id]++
		n := p.counts[id]
		p.mu.Unlock()
		a := p.answer(req, n)
		if a.hangUp {
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		for k, v := range a.header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, a.body)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *secProvider) seen() []secRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.reqs)
}

// secEnqueue enqueues one intent with drainer.enqueue on db and returns its key.
func secEnqueue(t *testing.T, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, tuple idemkey.Tuple, payload string) string {
	t.Helper()
	var key string
	var created bool
	err := db.QueryRow(context.Background(), `SELECT key, created FROM drainer.enqueue($1, $2, $3, $4, $5::jsonb)`,
		tuple.AgentRunID, tuple.StepID, tuple.ToolName, tuple.BusinessScope, payload).Scan(&key, &created)
	if err != nil {
		t.Fatalf("enqueue %+v: %v", tuple, err)
	}
	if !created || key != tuple.Key() {
		t.Fatalf("enqueue %+v: key %s created %v; want %s created", tuple, key, created, tuple.Key())
	}
	return key
}

// secWaitStatus waits until the row of key has status (read with the
// tombstone-aware drainer.result) and returns the row's attempts (-1 once
// pruned).
func secWaitStatus(t *testing.T, pool *pgxpool.Pool, d *daemon, key, status string, timeout time.Duration) {
	t.Helper()
	testkit.WaitFor(t, timeout, key+" "+status, func() (bool, string) {
		if d != nil {
			d.requireRunning()
		}
		var got string
		err := pool.QueryRow(context.Background(), `SELECT status FROM drainer.result($1)`, key).Scan(&got)
		if err != nil {
			return false, err.Error()
		}
		return got == status, "status " + got
	})
}

// TestSecurityPlantedSecretNeverLeaks plants two random secrets where
// operators keep them, the provider token (in ${env:…} of adapter headers
// and of an adapter URL's query) and the database password (only in
// DRAINER_DATABASE_URL), then drives everything that prints: `drainer run`
// at debug level draining rows to success, retry, terminal failure, an
// authentication failure, a refused connection and a provider hanging up on
// a URL whose query holds the token (transport errors quote the URL), a refused SIGHUP
// reload, `drainer check`, `drainer inspect` (table and JSON), `drainer
// list`, `drainer audit verify`, `drainer migrate`, /metrics, and commands
// failing on a bad adapter URL or a bad database URL. Neither secret appears
// in any of that output nor in any row of the schema. The provider checks
// that the token did reach it, so the test cannot pass by not sending it.
// (The MCP adapter's token is covered by TestMCPDrain; messages of the
// config loader by config.TestNoSecretInMessages; the unreachable database
// by daemon.TestNoPasswordInLogs.)
func TestSecurityPlantedSecretNeverLeaks(t *testing.T) {
	t.Parallel()
	dbURL, pool := newMigratedDB(t)
	token := secHex(t, 16) // 32 hex characters
	secrets := map[string]string{"provider token": token}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	if _, has := u.User.Password(); has {
		t.Logf("the test server's URL has a password of its own; only the provider token is planted")
	} else {
		// The test server trusts local connections: the password is
		// carried, parsed and (would be) sent, never checked.
		password := secHex(t, 16)
		u.User = url.UserPassword(u.User.Username(), password)
		secrets["database password"] = password
	}
	secretDBURL := u.String()

	var badAuth sync.Map // Authorization values that were not the token
	provider := newSecProvider(t, func(r secRequest, n int) secAnswer {
		js := map[string]string{"Content-Type": "application/json"}
		if got := r.Header.Get("Authorization"); got != "Bearer "+token {
			badAuth.Store(got, true)
			return secAnswer{400, js, `{"error":"unexpected credentials"}`, false}
		}
		switch r.Path {
		case "/charge":
			return secAnswer{200, js, `{"id":"ch_1","status":"captured"}`, false}
		case "/flaky":
			if n == 1 {
				return secAnswer{503, js, `{"error":"busy, try again"}`, false}
			}
			return secAnswer{200, js, `{"id":"ch_2","status":"captured"}`, false}
		case "/decline":
			return secAnswer{422, map[string]string{"Content-Type": "application/problem+json"},
				`{"type":"https://provider.example/declined","title":"card declined","status":422,"detail":"insufficient funds"}`, false}
		case "/denied":
			return secAnswer{401, js, `{"error":"token revoked"}`, false}
		case "/hangup":
			return secAnswer{hangUp: true}
		}
		return secAnswer{404, js, `{"error":"no such tool"}`, false}
	})

	closedPort := freePort(t) // nothing listens there
	dir := t.TempDir()
	goodCfg := fmt.Sprintf(`workers: 4
lease: 15s
adapters:
  provider:
    type: http
    url: %[1]s/{tool_name}
    timeout: 5s
    headers: {Authorization: "Bearer ${env:SEC_PROVIDER_TOKEN}", X-Api-Key: "${env:SEC_PROVIDER_TOKEN}"}
  gate:
    type: http
    url: %[1]s/{tool_name}
    timeout: 5s
    headers: {Authorization: "Bearer ${env:SEC_PROVIDER_TOKEN}"}
  closed:
    type: http
    url: "http://127.0.0.1:%[2]d/{tool_name}?sig=${env:SEC_PROVIDER_TOKEN}"
    timeout: 2s
    headers: {Authorization: "Bearer ${env:SEC_PROVIDER_TOKEN}"}
    breaker: {consecutive_failures: 0}
  signed:
    type: http
    url: "%[1]s/{tool_name}?sig=${env:SEC_PROVIDER_TOKEN}"
    timeout: 2s
    headers: {Authorization: "Bearer ${env:SEC_PROVIDER_TOKEN}"}
    breaker: {consecutive_failures: 0}
routes:
  charge: {adapter: provider, max_attempts: 5, backoff: {base: 50ms, cap: 200ms}}
  flaky: {adapter: provider, max_attempts: 5, backoff: {base: 50ms, cap: 200ms}}
  decline: {adapter: provider, max_attempts: 5, backoff: {base: 50ms, cap: 200ms}}
  denied: {adapter: gate, max_attempts: 5, backoff: {base: 50ms, cap: 200ms}}
  refused: {adapter: closed, max_attempts: 2, backoff: {base: 50ms, cap: 100ms}}
  hangup: {adapter: signed, max_attempts: 2, backoff: {base: 50ms, cap: 100ms}}
`, provider.srv.URL, closedPort)
	cfgPath := writeFile(t, dir, "drainer.yaml", goodCfg) // replaced by badCfg for the reload
	goodCfgPath := writeFile(t, dir, "good.yaml", goodCfg)
	// The same config with the provider's URL taken from a variable that
	// holds the token and is no URL.
	badCfg := strings.Replace(goodCfg, "url: "+provider.srv.URL+"/{tool_name}", `url: "${env:SEC_BAD_URL}"`, 1)
	badCfgPath := writeFile(t, dir, "bad.yaml", badCfg)
	for _, s := range secrets {
		if strings.Contains(goodCfg, s) || strings.Contains(badCfg, s) {
			t.Fatal("a config file holds a secret")
		}
	}

	env := []string{
		"DRAINER_DATABASE_URL=" + secretDBURL,
		"SEC_PROVIDER_TOKEN=" + token,
		"SEC_BAD_URL=ftp://user:" + token + "@[::1/" + token,
	}

	keys := map[string]string{} // tool → key
	for _, tool := range []string{"charge", "flaky", "decline", "denied", "refused", "hangup"} {
		keys[tool] = secEnqueue(t, pool, idemkey.Tuple{AgentRunID: "sec-leak-" + tool, StepID: "1", ToolName: tool, BusinessScope: "acct-1"},
			`{"amount_cents":1250,"currency":"EUR","memo":"order 77"}`)
	}

	d := startDaemonEnv(t, "drainer-secrets", env, "--config", cfgPath, "--log-level", "debug", "--shutdown-timeout", "10s")
	d.waitReady(time.Minute)
	secWaitStatus(t, pool, d, keys["charge"], "succeeded", time.Minute)
	secWaitStatus(t, pool, d, keys["flaky"], "succeeded", time.Minute)
	secWaitStatus(t, pool, d, keys["decline"], "failed", time.Minute)
	secWaitStatus(t, pool, d, keys["hangup"], "failed", time.Minute)
	// A refused connection sent nothing: no attempt consumed, retried.
	testkit.WaitFor(t, time.Minute, "the refused connection in last_error", func() (bool, string) {
		d.requireRunning()
		r := readRow(t, pool, keys["refused"])
		return r.LastError != nil && strings.Contains(*r.LastError, "refused"), strOrNilSec(r.LastError)
	})
	testkit.WaitFor(t, time.Minute, "an authentication failure on adapter gate", func() (bool, string) {
		d.requireRunning()
		n := d.metric("drainer_dispatch_total", `adapter="gate"`, `outcome="auth"`)
		return n >= 1, fmt.Sprintf("auth outcomes: %v", n)
	})
	if r := readRow(t, pool, keys["flaky"]); r.Attempts != 2 {
		t.Errorf("flaky row: %d attempts, want 2 (a retry)", r.Attempts)
	}

	// The paths that could leak were taken: the provider got the token,
	// error texts of the provider and of the transport were stored.
	sawToken, sawSig := false, false
	for _, r := range provider.seen() {
		sawToken = sawToken || r.Header.Get("Authorization") == "Bearer "+token && r.Header.Get("X-Api-Key") == token
		sawSig = sawSig || r.Path == "/hangup" && r.RawQuery == "sig="+token
	}
	if !sawToken || !sawSig {
		t.Errorf("the planted token did not reach the provider in Authorization and X-Api-Key (%v) and in the URL's query (%v)", sawToken, sawSig)
	}
	badAuth.Range(func(k, _ any) bool {
		t.Errorf("the provider got Authorization %q, not the planted token", k)
		return true
	})
	if r := readRow(t, pool, keys["decline"]); r.LastError == nil || !strings.Contains(*r.LastError, "insufficient funds") {
		t.Errorf("decline row: last_error %v, want the provider's problem detail", strOrNilSec(r.LastError))
	}
	if r := readRow(t, pool, keys["hangup"]); r.Attempts != 2 || r.LastError == nil {
		t.Errorf("hangup row: attempts %d, last_error %v; want 2 attempts and the transport error", r.Attempts, strOrNilSec(r.LastError))
	}

	type output struct{ name, text string }
	var outputs []output
	add := func(name string, res cliResult, wantCode int) {
		t.Helper()
		if res.code != wantCode {
			t.Errorf("%s: %s\nwant exit %d", name, res, wantCode)
		}
		outputs = append(outputs, output{name + " stdout", res.stdout}, output{name + " stderr", res.stderr})
	}
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		code, body := d.get(path)
		if code != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, code, body)
		}
		outputs = append(outputs, output{"GET " + path, body})
	}
	add("check", runCLI(t, env, "check", "--config", cfgPath), 0)
	add("check without the token", runCLI(t, nil, "check", "--config", cfgPath), 0)
	for tool, key := range keys {
		add("inspect "+tool, runCLI(t, env, "inspect", key), 0)
		add("inspect --output json "+tool, runCLI(t, env, "inspect", key, "--output", "json"), 0)
	}
	add("list", runCLI(t, env, "list"), 0)
	add("list --output json", runCLI(t, env, "list", "--output", "json"), 0)
	add("list --status failed --output json", runCLI(t, env, "list", "--status", "failed", "--output", "json"), 0)
	add("pause (list)", runCLI(t, env, "pause", "--output", "json"), 0)
	add("audit verify", runCLI(t, env, "audit", "verify"), 0)
	add("migrate", runCLI(t, env, "migrate"), 0)

	// A reload to a config whose URL is a secret is refused without
	// quoting it; the daemon keeps running.
	if err := os.WriteFile(cfgPath, []byte(badCfg), 0o644); err != nil {
		t.Fatal(err)
	}
	d.signal(syscall.SIGHUP)
	testkit.WaitFor(t, 30*time.Second, "the reload to be refused", func() (bool, string) {
		d.requireRunning()
		out := d.stderr.String()
		return strings.Contains(out, "config reload refused"), tail(out, 1000)
	})
	if code, body := d.get("/metrics"); code == http.StatusOK {
		outputs = append(outputs, output{"GET /metrics after the reload", body})
	}
	d.signal(syscall.SIGTERM)
	if code := d.exitCode(30 * time.Second); code != 0 {
		t.Errorf("drainer run exited %d after SIGTERM, want 0", code)
	}
	outputs = append(outputs, output{"drainer run (debug log)", d.stderr.String()})
	if !strings.Contains(d.stderr.String(), "level=DEBUG") {
		t.Error("the daemon logged nothing at debug level: the test would not see a debug-level leak")
	}

	// Failing configs and URLs.
	add("run with a bad adapter URL", runCLI(t, env, "run", "--config", badCfgPath, "--metrics-addr", "127.0.0.1:0"), 2)
	add("check with a bad adapter URL", runCLI(t, env, "check", "--config", badCfgPath), 2)
	for name, raw := range map[string]string{
		"unparsable":          "postgres://drainer:%s@[::1/db",
		"bad sslmode":         "postgres://drainer:%s@127.0.0.1:1/db?sslmode=bogus",
		"bad pool setting":    "postgres://drainer:%s@127.0.0.1:1/db?pool_max_conns=many",
		"password in query":   "postgres://drainer@127.0.0.1:1/db?password=%s&sslmode=bogus",
		"keyword/value":       "host=127.0.0.1 port=1 user=drainer password=%s sslmode=bogus",
		"unreachable (query)": "postgres://drainer@127.0.0.1:" + strconv.Itoa(closedPort) + "/db?password=%s&connect_timeout=2",
		"unreachable":         "postgres://drainer:%s@127.0.0.1:" + strconv.Itoa(closedPort) + "/db?connect_timeout=2",
	} {
		badEnv := []string{"DRAINER_DATABASE_URL=" + fmt.Sprintf(raw, token), "SEC_PROVIDER_TOKEN=" + token}
		res := runCLI(t, badEnv, "list")
		if res.code != 1 && res.code != 2 {
			t.Errorf("list with a %s database URL: %s\nwant exit 1 or 2", name, res)
		}
		outputs = append(outputs, output{"list, " + name + " database URL", res.stderr + res.stdout})
		res = runCLI(t, badEnv, "migrate")
		if res.code != 1 && res.code != 2 {
			t.Errorf("migrate with a %s database URL: %s\nwant exit 1 or 2", name, res)
		}
		outputs = append(outputs, output{"migrate, " + name + " database URL", res.stderr + res.stdout})
		if !strings.HasPrefix(name, "unreachable") {
			add("run, "+name+" database URL", runCLI(t, badEnv, "run", "--config", goodCfgPath, "--metrics-addr", "127.0.0.1:0"), 2)
		}
	}

	// Nor does any row of the schema hold a secret.
	for _, table := range []string{"outbox", "audit", "runs", "tombstones", "pauses", "backlog_snapshot", "schema_meta"} {
		var dump string
		err := pool.QueryRow(context.Background(),
			`SELECT coalesce(string_agg(t::text, E'\n'), '') FROM drainer.`+table+` t`).Scan(&dump)
		if err != nil {
			t.Fatal(err)
		}
		outputs = append(outputs, output{"table drainer." + table, dump})
		// The audit trail keeps payloads and error texts as hashes only.
		if table == "audit" && (strings.Contains(dump, "order 77") || strings.Contains(dump, "insufficient funds")) {
			t.Errorf("the audit trail holds a payload or an error text in clear:\n%s", dump)
		}
	}

	for _, o := range outputs {
		for what, s := range secrets {
			if i := strings.Index(o.text, s); i >= 0 {
				t.Errorf("%s shows the %s: …%s…", o.name, what, o.text[max(0, i-200):min(len(o.text), i+len(s)+100)])
			}
		}
	}
	t.Logf("checked %d outputs for %d planted secrets", len(outputs), len(secrets))
}

func strOrNilSec(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return strconv.Quote(*s)
}

// TestSecurityPayloadCannotSteerRequest enqueues payloads that name a URL,
// a method, headers (Host, Authorization, Idempotency-Key, a method
// override, a CRLF header injection) and another tool: every request goes to
// the configured URL with POST and the configured headers, carries the
// engine's key and tuple, and has the payload, unchanged, as its body. With
// the key placed in the body, a payload that already holds the key field
// with another value is never sent. A 302 to another host is not followed:
// the row fails and the other host sees nothing. (The adapter's unit tests
// check the same against the adapter alone: dispatch/webhook
// TestDispatchRequest, TestDispatchRedirectNotFollowed,
// TestKeyPlacementBodyRefusals.)
func TestSecurityPayloadCannotSteerRequest(t *testing.T) {
	t.Parallel()
	dbURL, pool := newMigratedDB(t)
	token := "cfg-" + secHex(t, 8)

	elsewhere := newSecProvider(t, func(secRequest, int) secAnswer {
		return secAnswer{200, map[string]string{"Content-Type": "application/json"}, `{"stolen":true}`, false}
	})
	provider := newSecProvider(t, func(r secRequest, _ int) secAnswer {
		if r.Path == "/moved" {
			return secAnswer{302, map[string]string{"Location": elsewhere.srv.URL + "/stolen"}, "moved", false}
		}
		return secAnswer{200, map[string]string{"Content-Type": "application/json"}, `{"ok":true}`, false}
	})
	providerURL, err := url.Parse(provider.srv.URL)
	if err != nil {
		t.Fatal(err)
	}

	cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", fmt.Sprintf(`workers: 4
lease: 15s
adapters:
  provider:
    type: http
    url: %s/{tool_name}
    timeout: 5s
    headers: {Authorization: "Bearer ${env:SEC_STEER_TOKEN}", X-Tenant: acme}
routes:
  charge: {adapter: provider, max_attempts: 5, backoff: {base: 50ms, cap: 200ms}}
  charge_body:
    adapter: provider
    max_attempts: 5
    backoff: {base: 50ms, cap: 200ms}
    idempotency_key: {name: idempotency_key, location: body}
  moved: {adapter: provider, max_attempts: 5, backoff: {base: 50ms, cap: 200ms}}
`, provider.srv.URL))

	hostile := map[string]any{
		"url":    elsewhere.srv.URL + "/stolen",
		"method": "DELETE",
		"headers": map[string]any{
			"Host": "evil.example", "Authorization": "Bearer attacker", "Idempotency-Key": "attacker-key",
			"X-Tenant": "evil", "Content-Type": "text/plain", "X-Agent-Idempotency-Tuple": "attacker",
		},
		"Host":                      "evil.example",
		"Authorization":             "Bearer attacker",
		"Idempotency-Key":           "attacker-key",
		"X-Agent-Idempotency-Tuple": "attacker",
		"X-HTTP-Method-Override":    "DELETE",
		"X-Tenant":                  "evil",
		"tool_name":                 "moved",
		"adapter":                   "elsewhere",
		"note":                      "line\r\nX-Injected: yes\r\n\r\nGET /stolen HTTP/1.1",
		"amount_cents":              500,
	}
	hostileJSON, _ := json.Marshal(hostile)
	withField := func(extra map[string]any) string {
		m := map[string]any{}
		for k, v := range hostile {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		b, _ := json.Marshal(m)
		return string(b)
	}

	type row struct {
		tuple   idemkey.Tuple
		payload string
		status  string
	}
	rows := []row{
		{idemkey.Tuple{AgentRunID: "sec-steer-1", StepID: "1", ToolName: "charge", BusinessScope: "acct-1"}, string(hostileJSON), "succeeded"},
		{idemkey.Tuple{AgentRunID: "sec-steer-2", StepID: "1", ToolName: "charge", BusinessScope: "acct-2"},
			`{"headers":[["Host","evil.example"]],"url":["http://evil.example/"],"method":null}`, "succeeded"},
		{idemkey.Tuple{AgentRunID: "sec-steer-3", StepID: "1", ToolName: "charge_body", BusinessScope: "acct-3"}, string(hostileJSON), "succeeded"},
		{idemkey.Tuple{AgentRunID: "sec-steer-4", StepID: "1", ToolName: "charge_body", BusinessScope: "acct-4"},
			withField(map[string]any{"idempotency_key": "attacker-key"}), "failed"},
		{idemkey.Tuple{AgentRunID: "sec-steer-5", StepID: "1", ToolName: "moved", BusinessScope: "acct-5"}, string(hostileJSON), "failed"},
	}
	for _, r := range rows {
		secEnqueue(t, pool, r.tuple, r.payload)
	}

	d := startDaemonEnv(t, "drainer-steer", []string{"SEC_STEER_TOKEN=" + token},
		"--config", cfgPath, "--database-url", dbURL, "--shutdown-timeout", "10s")
	d.waitReady(time.Minute)
	for _, r := range rows {
		secWaitStatus(t, pool, d, r.tuple.Key(), r.status, time.Minute)
	}
	d.signal(syscall.SIGTERM)
	if code := d.exitCode(30 * time.Second); code != 0 {
		t.Errorf("drainer run exited %d after SIGTERM, want 0", code)
	}

	if got := elsewhere.seen(); len(got) != 0 {
		t.Errorf("the other host got %d requests, want none: %+v", len(got), got)
	}
	byKey := map[string]row{}
	for _, r := range rows {
		byKey[r.tuple.Key()] = r
	}
	seenPerKey := map[string]int{}
	for _, req := range provider.seen() {
		var body map[string]any
		if err := json.Unmarshal(req.Body, &body); err != nil {
			t.Errorf("request %s %s: body is not the JSON payload: %q", req.Method, req.Path, req.Body)
			continue
		}
		key := req.Header.Get("Idempotency-Key")
		if req.Path == "/charge_body" {
			key, _ = body["idempotency_key"].(string)
		}
		r, ok := byKey[key]
		if !ok {
			t.Errorf("request %s %s carries key %q, which is no row's key", req.Method, req.Path, key)
			continue
		}
		seenPerKey[key]++
		if req.Method != http.MethodPost || req.Path != "/"+r.tuple.ToolName || req.RawQuery != "" || req.Host != providerURL.Host {
			t.Errorf("row %s: request %s http://%s%s?%s, want POST %s/%s", key, req.Method, req.Host, req.Path, req.RawQuery, provider.srv.URL, r.tuple.ToolName)
		}
		want := map[string]string{
			"Authorization":             "Bearer " + token,
			"X-Tenant":                  "acme",
			"Content-Type":              "application/json",
			"X-Agent-Idempotency-Tuple": r.tuple.Encoded(),
		}
		if r.tuple.ToolName != "charge_body" {
			want["Idempotency-Key"] = r.tuple.Key()
		} else if v, ok := req.Header["Idempotency-Key"]; ok {
			t.Errorf("row %s: Idempotency-Key header %q although the key goes in the body", key, v)
		}
		for name, w := range want {
			if got := req.Header.Values(name); len(got) != 1 || got[0] != w {
				t.Errorf("row %s: header %s = %q, want exactly %q", key, name, got, w)
			}
		}
		for _, name := range []string{"X-Http-Method-Override", "X-Injected", "Adapter", "Tool_name"} {
			if v, ok := req.Header[name]; ok {
				t.Errorf("row %s: the payload set header %s: %q", key, name, v)
			}
		}
		var wantBody map[string]any
		if err := json.Unmarshal([]byte(r.payload), &wantBody); err != nil {
			t.Fatal(err)
		}
		if r.tuple.ToolName == "charge_body" {
			wantBody["idempotency_key"] = r.tuple.Key()
		}
		if !reflect.DeepEqual(body, wantBody) {
			t.Errorf("row %s: body %s, want the payload %s", key, req.Body, r.payload)
		}
	}
	for _, r := range rows {
		key := r.tuple.Key()
		want := 1
		if r.status == "failed" && r.tuple.ToolName == "charge_body" {
			want = 0 // refused before sending
		}
		if seenPerKey[key] != want {
			t.Errorf("row %s (%s): the provider saw it %d times, want %d", key, r.tuple.ToolName, seenPerKey[key], want)
		}
	}
	if r := readRow(t, pool, rows[3].tuple.Key()); r.LastError == nil || !strings.Contains(*r.LastError, "already has that field") {
		t.Errorf("row with its own idempotency_key: last_error %s, want the refusal", strOrNilSec(r.LastError))
	}
	if r := readRow(t, pool, rows[4].tuple.Key()); r.Attempts != 1 || r.LastError == nil || !strings.Contains(*r.LastError, "302") {
		t.Errorf("redirected row: attempts %d, last_error %s; want one attempt and the 302", r.Attempts, strOrNilSec(r.LastError))
	}
}

// secInjections are CLI arguments that would change the schema or its rows
// if they ever reached SQL as text.
var secInjections = []string{
	`x'; DROP TABLE drainer.outbox; --`,
	`"); DELETE FROM drainer.outbox; --`,
	`' OR '1'='1`,
	`1; UPDATE drainer.outbox SET status = 'succeeded'`,
	`$$; DROP SCHEMA drainer CASCADE; $$`,
	`\'; TRUNCATE drainer.outbox; --`,
	`idem_v1_' || (SELECT key FROM drainer.outbox LIMIT 1) || '`,
	`*/ DROP TABLE drainer.audit; /*`,
	`x%' OR key LIKE '%`,
	`drainer; DROP TABLE drainer.outbox`,
}

// secFingerprint captures a schema: its objects, and a hash of the rows of
// each table that CLI arguments could reach.
type secFingerprint struct {
	Relations, Functions, Triggers          string
	OutboxRows                              int
	Outbox, Runs, Tombstones, Pauses, Metas string
	AuditRows                               int
	AuditBroken                             int
}

// secSnapshot fingerprints the drainer schema; outbox rows whose key is in
// exclude are left out.
func secSnapshot(t *testing.T, pool *pgxpool.Pool, exclude []string) secFingerprint {
	t.Helper()
	ctx := context.Background()
	if exclude == nil {
		exclude = []string{}
	}
	var f secFingerprint
	q := func(dst any, sql string, args ...any) {
		t.Helper()
		if err := pool.QueryRow(ctx, sql, args...).Scan(dst); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	q(&f.Relations, `SELECT string_agg(c.relname || ':' || c.relkind::text, ',' ORDER BY c.relname)
	    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'drainer'`)
	q(&f.Functions, `SELECT string_agg(p.oid::regprocedure::text || ':' || md5(p.prosrc), ',' ORDER BY p.oid::regprocedure::text)
	    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'drainer'`)
	q(&f.Triggers, `SELECT string_agg(tgname, ',' ORDER BY tgname) FROM pg_trigger
	    WHERE tgrelid IN ('drainer.outbox'::regclass, 'drainer.queue'::regclass, 'drainer.intents'::regclass)`)
	if err := pool.QueryRow(ctx, `SELECT count(*), coalesce(md5(string_agg(o::text, E'\n' ORDER BY o.seq)), '')
	    FROM drainer.outbox o WHERE NOT (o.key = ANY($1))`, exclude).Scan(&f.OutboxRows, &f.Outbox); err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		dst          *string
		table, order string
	}{
		{&f.Runs, "runs", "agent_run_id"}, {&f.Tombstones, "tombstones", "key"},
		{&f.Pauses, "pauses", "target, name"}, {&f.Metas, "schema_meta", "name"},
	} {
		q(x.dst, `SELECT coalesce(md5(string_agg(t::text, E'\n' ORDER BY `+x.order+`)), '') FROM drainer.`+x.table+` t`)
	}
	q(&f.AuditRows, `SELECT count(*) FROM drainer.audit`)
	q(&f.AuditBroken, `SELECT count(*) FROM drainer.audit_verify(1000)`)
	return f
}

// secCompare fails t if after differs from before in anything but the
// number of audit entries, which may only grow.
func secCompare(t *testing.T, what string, before, after secFingerprint) {
	t.Helper()
	b, a := before, after
	if a.AuditRows < b.AuditRows {
		t.Errorf("%s: audit entries went from %d to %d", what, b.AuditRows, a.AuditRows)
	}
	if a.AuditBroken != 0 {
		t.Errorf("%s: audit_verify finds %d broken links", what, a.AuditBroken)
	}
	b.AuditRows, a.AuditRows = 0, 0
	if a != b {
		t.Errorf("%s: the schema changed:\nbefore %+v\nafter  %+v", what, b, a)
	}
}

// secClean fails t unless res is a clean exit with code want: no panic, and
// an error that is one "drainer: …" message on stderr.
func secClean(t *testing.T, what string, res cliResult, want ...int) {
	t.Helper()
	if !slices.Contains(want, res.code) {
		t.Errorf("%s: %s\nwant exit %v", what, res, want)
	}
	all := res.stdout + res.stderr
	if strings.Contains(all, "panic") || strings.Contains(all, "goroutine ") || strings.Contains(all, "SQLSTATE 42601") {
		t.Errorf("%s: a panic or a syntax error reached the output:\n%s", what, res)
	}
	if res.code != 0 && (!strings.HasPrefix(res.stderr, "drainer: ") || strings.TrimSpace(res.stderr) == "drainer:") {
		t.Errorf("%s: exit %d without a message on stderr:\n%s", what, res.code, res)
	}
}

// TestSecuritySQLInjectionThroughCLI gives every CLI argument that reaches
// SQL values written to break out of a string literal or an identifier, and
// checks that the schema, its tables and every row are exactly as before
// (the fingerprint of secSnapshot), that refusals are clean exits 1 or 2,
// and that values which are data (a route's name, a run id, a tuple, a
// payload) are stored and printed exactly as given. Tuples with quotes,
// backslashes, control characters, non-ASCII text and SQL round-trip
// through `drainer enqueue` and drainer.enqueue byte for byte, under the key
// the Go function computes.
func TestSecuritySQLInjectionThroughCLI(t *testing.T) {
	t.Parallel()
	dbURL, pool := newMigratedDB(t)
	ctx := context.Background()
	enqueueCharges(t, pool, 8)
	// Some variety: a failed row, an aborted run, a pause.
	if _, err := pool.Exec(ctx, `UPDATE drainer.outbox SET status = 'failed', last_error = 'declined'
	    WHERE seq = (SELECT min(seq) FROM drainer.outbox)`); err != nil {
		t.Fatal(err)
	}
	env := []string{"DRAINER_DATABASE_URL=" + dbURL, "USER=sec-test"}
	secClean(t, "pause charge_card", runCLI(t, env, "pause", "charge_card", "--reason", "baseline"), 0)
	before := secSnapshot(t, pool, nil)
	if before.OutboxRows != 8 || before.Runs == "" {
		t.Fatalf("baseline: %+v", before)
	}

	// One subtest per value, side by side (go test -parallel); the group
	// returns once all ran.
	t.Run("operator_commands", func(t *testing.T) {
		for i, v := range secInjections {
			t.Run(strconv.Itoa(i), func(t *testing.T) {
				t.Parallel()
				secClean(t, "inspect "+v, runCLI(t, env, "inspect", v), 1)
				res := runCLI(t, env, "inspect", v, "--output", "json")
				secClean(t, "inspect --output json "+v, res, 1)
				if !strings.Contains(res.stderr, v) {
					t.Errorf("inspect %q: the message does not name the key: %s", v, res.stderr)
				}
				secClean(t, "list --status "+v, runCLI(t, env, "list", "--status="+v), 2)
				secClean(t, "list --older-than "+v, runCLI(t, env, "list", "--older-than="+v), 2)
				for _, flag := range []string{"--run", "--tool"} {
					res := runCLI(t, env, "list", flag+"="+v, "--output", "json")
					secClean(t, "list "+flag+" "+v, res, 0)
					if strings.TrimSpace(res.stdout) != "[]" {
						t.Errorf("list %s %q: %s, want []", flag, v, res.stdout)
					}
				}
				secClean(t, "requeue "+v, runCLI(t, env, "requeue", v, "--actor="+v), 1)
				secClean(t, "requeue --status "+v, runCLI(t, env, "requeue", "--status="+v), 2)
				secClean(t, "cancel "+v, runCLI(t, env, "cancel", v, "--actor="+v, "--reason="+v), 1)
				secClean(t, "cancel --run "+v, runCLI(t, env, "cancel", "--run="+v, "--actor="+v, "--reason="+v), 0)
				secClean(t, "abort "+v, runCLI(t, env, "abort", v, "--reason="+v, "--actor="+v), 1)
				secClean(t, "resolve "+v, runCLI(t, env, "resolve", v, "--note="+v, "--actor="+v), 1)
				// A pause names what it pauses: the value is data, stored as is.
				for _, target := range []struct{ name, arg string }{{"route", v}, {"adapter", "--adapter=" + v}} {
					res := runCLI(t, env, "pause", target.arg, "--reason="+v, "--actor="+v, "--output", "json")
					secClean(t, "pause "+target.arg, res, 0)
					var p struct {
						Target   string `json:"target"`
						Name     string `json:"name"`
						PausedBy string `json:"paused_by"`
						Reason   string `json:"reason"`
					}
					if err := json.Unmarshal([]byte(res.stdout), &p); err != nil || p.Target != target.name || p.Name != v || p.PausedBy != v || p.Reason != v {
						t.Errorf("pause %s: %s (%v), want %s %q paused by %q for %q", target.arg, res.stdout, err, target.name, v, v, v)
					}
					secClean(t, "resume "+target.arg, runCLI(t, env, "resume", target.arg, "--reason="+v, "--actor="+v), 0)
				}
			})
		}
	})
	// --schema is an identifier: refused unless plain, a usage error (exit 2).
	t.Run("schema_flag", func(t *testing.T) {
		for i, v := range []string{secInjections[0], secInjections[1], secInjections[9], "Drainer", `drainer"`} {
			t.Run(strconv.Itoa(i), func(t *testing.T) {
				t.Parallel()
				for _, args := range [][]string{
					{"list"}, {"inspect", "k"}, {"requeue", "k"}, {"cancel", "k"}, {"abort", "r", "--reason", "x"},
					{"resolve", "k", "--note", "x"}, {"pause", "r"}, {"resume", "r"}, {"audit", "verify"}, {"migrate"},
					{"enqueue", "--run", "r", "--step", "s", "--tool", "t", "--payload", "{}"},
				} {
					res := runCLI(t, env, append(args, "--schema="+v)...)
					secClean(t, strings.Join(args, " ")+" --schema "+v, res, 2)
					if !strings.Contains(res.stderr, "invalid schema name") {
						t.Errorf("%s --schema %q: %s\nwant the schema name refused", strings.Join(args, " "), v, res)
					}
				}
			})
		}
	})
	secCompare(t, "after the operator commands", before, secSnapshot(t, pool, nil))

	// Tuples and payloads are data: they round-trip exactly.
	weird := []string{
		`x'; DROP TABLE drainer.outbox; --`,
		`"); DELETE FROM drainer.outbox; --`,
		`O'Brien said "hi" \ and \\ and \' and ''`,
		`$$; DROP SCHEMA drainer CASCADE; $$`,
		"ünïcødé 🚀 漢字 \u202eRTL\u202c \u2028 \ufeff",
		"tab\tnewline\ncarriage\rbell\a",
		`%s %d %v {{.schema}} {s} :"schema" \N NULL E'\x41' U&'\0041'`,
		strings.Repeat("é", 512), // 1024 bytes, the limit
	}
	var created []string
	for i, v := range weird {
		for _, via := range []string{"cli", "sql"} {
			tuple := idemkey.Tuple{AgentRunID: v, StepID: via + "-" + strconv.Itoa(i), ToolName: v, BusinessScope: v}
			if i == 1 {
				tuple.BusinessScope = ""
			}
			payload, _ := json.Marshal(map[string]any{"q": v, "nested": map[string]any{v: []string{v, `'`, `"`}}, "n": i})
			key := tuple.Key()
			if via == "cli" {
				args := []string{"enqueue", "--run=" + tuple.AgentRunID, "--step=" + tuple.StepID, "--tool=" + tuple.ToolName,
					"--scope=" + tuple.BusinessScope, "--payload=" + string(payload)}
				// As a traceparent the value is refused, naming the field,
				// and nothing is enqueued.
				res := runCLI(t, env, append(args, "--traceparent="+v)...)
				if res.code != 1 || !strings.Contains(res.stderr, "is not a W3C trace context") {
					t.Errorf("enqueue with traceparent %q: %s, want exit 1 naming the traceparent", v, res)
				}
				args = append(args, "--traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
				res = runCLI(t, env, args...)
				secClean(t, "enqueue "+strconv.Quote(v), res, 0)
				if strings.TrimSpace(res.stdout) != key+" created" {
					t.Errorf("enqueue %q: %q, want %q", v, res.stdout, key+" created")
				}
				res = runCLI(t, env, args...)
				if res.code != 0 || strings.TrimSpace(res.stdout) != key+" existing" {
					t.Errorf("enqueue %q again: %s, want %s existing", v, res, key)
				}
			} else {
				secEnqueue(t, pool, tuple, string(payload))
			}
			created = append(created, key)

			var got idemkey.Tuple
			var gotPayload, sqlKey string
			err := pool.QueryRow(ctx, `SELECT agent_run_id, step_id, tool_name, business_scope, payload::text,
			        drainer.idempotency_key(agent_run_id, step_id, tool_name, business_scope)
			    FROM drainer.outbox WHERE key = $1`, key).
				Scan(&got.AgentRunID, &got.StepID, &got.ToolName, &got.BusinessScope, &gotPayload, &sqlKey)
			if err != nil {
				t.Fatalf("read back %q (%s): %v", v, via, err)
			}
			if got != tuple || sqlKey != key {
				t.Errorf("%s: stored %+v under SQL key %s, want %+v under %s", via, got, sqlKey, tuple, key)
			}
			var want, have any
			_ = json.Unmarshal(payload, &want)
			if err := json.Unmarshal([]byte(gotPayload), &have); err != nil || !reflect.DeepEqual(have, want) {
				t.Errorf("%s %q: payload %s, want %s", via, v, gotPayload, payload)
			}
		}
		// The operator sees the values as they are.
		res := runCLI(t, env, "list", "--run="+v, "--output", "json")
		var listed []struct {
			AgentRunID string `json:"agent_run_id"`
		}
		secClean(t, "list --run (weird)", res, 0)
		if err := json.Unmarshal([]byte(res.stdout), &listed); err != nil || len(listed) != 2 || listed[0].AgentRunID != v {
			t.Errorf("list --run %q: %s (%v), want its 2 rows", v, res.stdout, err)
		}
	}
	// Refused tuples and payloads are clean usage errors or database
	// errors, never a syntax error.
	for _, c := range []struct {
		name string
		args []string
		code int
	}{
		{"empty run", []string{"--run=", "--step=s", "--tool=t", "--payload={}"}, 2},
		{"1025-byte run", []string{"--run=" + strings.Repeat("a", 1025), "--step=s", "--tool=t", "--payload={}"}, 2},
		{"invalid UTF-8", []string{"--run=\xff\xfe", "--step=s", "--tool=t", "--payload={}"}, 2},
		{"SQL as payload", []string{"--run=r", "--step=s", "--tool=t", "--payload=" + secInjections[0]}, 2},
		{"NUL escape in payload", []string{"--run=r", "--step=s", "--tool=t", `--payload={"a":"\u0000"}`}, 2},
	} {
		secClean(t, "enqueue "+c.name, runCLI(t, env, append([]string{"enqueue"}, c.args...)...), c.code)
	}
	secCompare(t, "after the enqueues (their own rows left out)", before, secSnapshot(t, pool, created))
}

// ---------- least privilege ----------

// secRolesSQL is the file of GRANTs that docs/security.md shows.
const secRolesSQL = "../deploy/sql/roles.sql"

// secRoles are an owner, a runtime and a producer role made for one test,
// and its database (newSecRoles: migrated by the owner, deploy/sql/roles.sql
// applied).
type secRoles struct {
	owner, runtime, producer          string // role names
	ownerURL, runtimeURL, producerURL string
	admin                             *pgxpool.Pool // superuser pool on the database
}

// newSecRoles creates the roles (dropped when the test ends), migrates a new
// database as the owner and applies deploy/sql/roles.sql as the owner.
func newSecRoles(t *testing.T) *secRoles {
	t.Helper()
	r := createSecRoles(t)
	if res := runCLI(t, nil, "migrate", "--database-url", r.ownerURL); res.code != 0 {
		t.Fatalf("drainer migrate as the owner: %s", res)
	}
	r.applyRolesSQL(t)
	return r
}

// createSecRoles creates the roles (dropped when the test ends) and a new
// database on which the owner may create the schema, and nothing else.
func createSecRoles(t *testing.T) *secRoles {
	t.Helper()
	ctx := context.Background()
	dbURL := dbtest.NewDatabase(t)
	admin, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	var canCreateRoles bool
	if err := admin.QueryRow(ctx, `SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user`).Scan(&canCreateRoles); err != nil {
		t.Fatal(err)
	}
	if !canCreateRoles {
		t.Fatal("the least-privilege tests create roles: DRAINER_TEST_DATABASE_URL must name a role with CREATEROLE (or leave it unset for a throwaway cluster)")
	}
	suffix := secHex(t, 4)
	r := &secRoles{
		owner:    "drainer_sec_owner_" + suffix,
		runtime:  "drainer_sec_runtime_" + suffix,
		producer: "drainer_sec_producer_" + suffix,
		admin:    admin,
	}
	roleURL := func(role, password string) string {
		u, err := url.Parse(dbURL)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword(role, password)
		return u.String()
	}
	// Roles are cluster-wide: drop them whatever happens (this cleanup
	// runs before the database is dropped and the pool closed).
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, role := range []string{r.producer, r.runtime, r.owner} {
			id := pgx.Identifier{role}.Sanitize()
			var exists bool
			_ = admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, role).Scan(&exists)
			if !exists {
				continue
			}
			if _, err := admin.Exec(ctx, "DROP OWNED BY "+id+" CASCADE"); err != nil {
				t.Errorf("drop owned by %s: %v", role, err)
			}
			if _, err := admin.Exec(ctx, "DROP ROLE "+id); err != nil {
				t.Errorf("drop role %s: %v", role, err)
			}
		}
	})
	for _, role := range []string{r.owner, r.runtime, r.producer} {
		password := secHex(t, 12)
		if _, err := admin.Exec(ctx, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN PASSWORD '"+password+"'"); err != nil {
			t.Fatal(err)
		}
		switch role {
		case r.owner:
			r.ownerURL = roleURL(role, password)
		case r.runtime:
			r.runtimeURL = roleURL(role, password)
		case r.producer:
			r.producerURL = roleURL(role, password)
		}
	}
	// The owner creates the schema; nothing else is granted on the database.
	if _, err := admin.Exec(ctx, "GRANT CREATE ON DATABASE "+pgx.Identifier{databaseName(t, dbURL)}.Sanitize()+
		" TO "+pgx.Identifier{r.owner}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return r
}

// applyRolesSQL applies deploy/sql/roles.sql as the owner.
func (r *secRoles) applyRolesSQL(t *testing.T) {
	t.Helper()
	raw, err := os.ReadFile(secRolesSQL)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.applyGrants(string(raw)); err != nil {
		t.Fatalf("apply %s as the owner: %v", secRolesSQL, err)
	}
}

// applyGrants runs a file of statements written like deploy/sql/roles.sql
// as the owner, its psql variables replaced by this test's names.
func (r *secRoles) applyGrants(raw string) error {
	ctx := context.Background()
	sql := strings.NewReplacer(
		`:"schema"`, pgx.Identifier{"drainer"}.Sanitize(),
		`:"runtime_role"`, pgx.Identifier{r.runtime}.Sanitize(),
		`:"producer_role"`, pgx.Identifier{r.producer}.Sanitize(),
	).Replace(raw)
	if strings.Contains(sql, `:"`) {
		return errors.New("the file holds a variable the test does not know")
	}
	conn, err := pgx.Connect(ctx, r.ownerURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	// No arguments: the simple protocol runs every statement of the file.
	_, err = conn.Exec(ctx, sql)
	return err
}

func (r *secRoles) connect(t *testing.T, u string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// secPgCode returns the SQLSTATE of err, "" if it has none.
func secPgCode(err error) string {
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok {
		return pe.Code
	}
	return ""
}

// TestSecurityLeastPrivilegeRoles runs drainer under the roles of
// deploy/sql/roles.sql: the owner migrates; the producer enqueues (CLI and
// SQL, duplicates and a mismatch included), reads results and aborts a run;
// the runtime role runs the daemon, which drains rows to success, through a
// retry, a terminal failure and the saga compensating it, a compensation
// that fails, its alert and its resolution, a pause, and retention pruning,
// with no permission error in its log; the operator commands all work under
// the runtime role. The audit names the producer's enqueues and abort after
// its role. Then each role is shown not to be able to do what it must not:
// the producer cannot read, insert, change or delete any row, nor write an
// audit entry, but through its three functions; the runtime role cannot
// change the schema, migrate, or insert an audit entry itself.
func TestSecurityLeastPrivilegeRoles(t *testing.T) {
	t.Parallel()
	r := newSecRoles(t)
	ctx := context.Background()
	admin := r.admin

	provider := newSecProvider(t, func(req secRequest, n int) secAnswer {
		js := map[string]string{"Content-Type": "application/json"}
		switch req.Path {
		case "/flaky":
			if n == 1 {
				return secAnswer{503, js, `{"error":"busy"}`, false}
			}
		case "/reject", "/unbook_bad":
			return secAnswer{422, js, `{"error":"rejected"}`, false}
		}
		return secAnswer{200, js, `{"ok":true}`, false}
	})
	cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", fmt.Sprintf(`workers: 4
lease: 15s
alerts: {compensation_failed: provider}
adapters:
  provider: {type: http, url: "%s/{tool_name}", timeout: 5s}
routes:
  book: {adapter: provider, compensation: unbook, max_attempts: 5, backoff: {base: 50ms, cap: 200ms}}
  flaky: {adapter: provider, max_attempts: 5, backoff: {base: 50ms, cap: 200ms}}
  reject: {adapter: provider, max_attempts: 5, backoff: {base: 50ms, cap: 200ms}}
  unbook: {adapter: provider, max_attempts: 5, backoff: {base: 50ms, cap: 200ms}}
  book2: {adapter: provider, compensation: unbook_bad, max_attempts: 5, backoff: {base: 50ms, cap: 200ms}}
  unbook_bad: {adapter: provider, max_attempts: 3, backoff: {base: 50ms, cap: 200ms}}
  held: {adapter: provider, max_attempts: 5, backoff: {base: 50ms, cap: 200ms}}
retention: {interval: 1s, cancelled: 1s}
`, provider.srv.URL))
	operator := []string{"DRAINER_DATABASE_URL=" + r.runtimeURL, "USER=sec-operator"}
	producerEnv := []string{"DRAINER_DATABASE_URL=" + r.producerURL}
	op := func(args ...string) cliResult {
		t.Helper()
		res := runCLI(t, operator, args...)
		if res.code != 0 {
			t.Fatalf("drainer %s as the runtime role: %s", strings.Join(args, " "), res)
		}
		return res
	}
	producer := r.connect(t, r.producerURL)
	t.Cleanup(func() { producer.Close(context.Background()) })
	// result reads a row's status as an agent does; "" while there is no row
	// (a compensation row the saga has not created yet).
	result := func(key string) string {
		t.Helper()
		var status string
		err := producer.QueryRow(ctx, `SELECT status FROM drainer.result($1)`, key).Scan(&status)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatalf("drainer.result(%s) as the producer: %v", key, err)
		}
		return status
	}
	waitResult := func(d *daemon, key, status string) {
		t.Helper()
		testkit.WaitFor(t, 90*time.Second, key+" "+status, func() (bool, string) {
			d.requireRunning()
			got := result(key)
			return got == status, got
		})
	}
	tuple := func(run, step, tool string) idemkey.Tuple {
		return idemkey.Tuple{AgentRunID: run, StepID: step, ToolName: tool, BusinessScope: "acct-7"}
	}

	// Before the daemon: the operator pauses a route, the producer
	// enqueues, the operator cancels and requeues a row.
	op("pause", "held", "--reason", "maintenance window")
	bookA := tuple("run-a", "1", "book")
	args := []string{"enqueue", "--run", bookA.AgentRunID, "--step", bookA.StepID, "--tool", bookA.ToolName, "--scope", bookA.BusinessScope}
	if res := runCLI(t, producerEnv, append(args, "--payload", `{"seat":"12A"}`)...); res.code != 0 || strings.TrimSpace(res.stdout) != bookA.Key()+" created" {
		t.Fatalf("drainer enqueue as the producer: %s", res)
	}
	if res := runCLI(t, producerEnv, append(args, "--payload", `{"seat":"12A"}`)...); res.code != 0 || strings.TrimSpace(res.stdout) != bookA.Key()+" existing" {
		t.Fatalf("drainer enqueue again as the producer: %s", res)
	}
	if res := runCLI(t, producerEnv, append(args, "--payload", `{"seat":"14C"}`)...); res.code != 1 || !strings.Contains(res.stderr, "23505") {
		t.Fatalf("drainer enqueue of another payload as the producer: %s\nwant exit 1 with 23505", res)
	}
	flakyA := tuple("run-a", "2", "flaky")
	book2B := tuple("run-b", "1", "book2")
	heldC := tuple("run-c", "1", "held")
	heldD := tuple("run-d", "1", "held")
	for _, tp := range []idemkey.Tuple{flakyA, book2B, heldC, heldD} {
		secEnqueue(t, producer, tp, `{"n":1}`)
	}
	op("cancel", heldD.Key(), "--reason", "wrong seat")
	op("requeue", heldD.Key())

	d := startDaemonEnv(t, "drainer-runtime-role", []string{"DRAINER_DATABASE_URL=" + r.runtimeURL},
		"--config", cfgPath, "--log-level", "debug", "--shutdown-timeout", "10s")
	d.waitReady(time.Minute)

	// A retry, then a terminal failure whose saga compensates the run.
	waitResult(d, bookA.Key(), "succeeded")
	waitResult(d, flakyA.Key(), "succeeded")
	var attempts int
	if err := admin.QueryRow(ctx, `SELECT attempts FROM drainer.outbox WHERE key = $1`, flakyA.Key()).Scan(&attempts); err != nil || attempts != 2 {
		t.Errorf("flaky row: %d attempts (%v), want 2", attempts, err)
	}
	rejectA := tuple("run-a", "3", "reject")
	secEnqueue(t, producer, rejectA, `{"n":1}`)
	waitResult(d, rejectA.Key(), "failed")
	waitResult(d, bookA.Key(), "compensated")
	waitResult(d, tuple("run-a", "1", "unbook").Key(), "succeeded")

	// An operator abort whose compensation fails: alert, then resolve.
	waitResult(d, book2B.Key(), "succeeded")
	op("abort", "run-b", "--reason", "customer cancelled")
	unbookB := tuple("run-b", "1", "unbook_bad")
	waitResult(d, unbookB.Key(), "compensation_failed")
	testkit.WaitFor(t, time.Minute, "the compensation_failed alert", func() (bool, string) {
		d.requireRunning()
		for _, req := range provider.seen() {
			if req.Path == "/drainer.compensation_failed" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d requests", len(provider.seen()))
	})
	op("resolve", unbookB.Key(), "--note", "refunded by hand")
	waitResult(d, book2B.Key(), "compensated")

	// The producer aborts a run whose row waits on a paused route; the
	// cancelled row is pruned to a tombstone.
	// (The row is pending, deferred by the pause; should a claim hold it at
	// this instant, the saga cancels it right after, as docs/reference.md §6 says.)
	var cancelled int
	if err := producer.QueryRow(ctx, `SELECT drainer.abort_run($1, $2)`, "run-c", "the agent changed its mind").Scan(&cancelled); err != nil {
		t.Fatalf("drainer.abort_run as the producer: %v", err)
	}
	t.Logf("drainer.abort_run as the producer cancelled %d row(s) at once", cancelled)
	// The functions run with the owner's rights; the audit names the caller.
	var enqueuedBy, abortedBy string
	if err := admin.QueryRow(ctx, `SELECT actor FROM drainer.audit WHERE key = $1 AND event = 'enqueued'`, heldC.Key()).Scan(&enqueuedBy); err != nil {
		t.Fatal(err)
	}
	if err := admin.QueryRow(ctx, `SELECT aborted_by FROM drainer.runs WHERE agent_run_id = 'run-c'`).Scan(&abortedBy); err != nil {
		t.Fatal(err)
	}
	if enqueuedBy != "db:"+r.producer || abortedBy != "agent:"+r.producer {
		t.Errorf("the producer's enqueue is audited as %q and its abort recorded as by %q; want db:%s and agent:%s",
			enqueuedBy, abortedBy, r.producer, r.producer)
	}
	testkit.WaitFor(t, time.Minute, "the cancelled row to be pruned", func() (bool, string) {
		d.requireRunning()
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM drainer.tombstones WHERE key = $1`, heldC.Key()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1, fmt.Sprintf("%d tombstones", n)
	})
	if got := result(heldC.Key()); got != "cancelled" {
		t.Errorf("result of the pruned row: %s, want cancelled", got)
	}
	op("resume", "held")
	waitResult(d, heldD.Key(), "succeeded")

	// The operator commands under the runtime role.
	op("list", "--output", "json")
	op("list", "--status", "compensated", "--run", "run-a", "--older-than", "1ms")
	op("inspect", bookA.Key())
	op("inspect", heldC.Key(), "--output", "json")
	op("cancel", "--run", "run-a", "--dry-run", "--reason", "preview")
	op("requeue", "--status", "failed", "--dry-run")
	op("pause", "--adapter", "provider")
	op("pause")
	op("resume", "--adapter", "provider")
	if res := op("audit", "verify"); !strings.Contains(res.stdout, "verified") {
		t.Errorf("drainer audit verify: %s", res)
	}
	// The counters behind the SECURITY DEFINER functions reach the metrics.
	testkit.WaitFor(t, time.Minute, "the enqueue counters in /metrics", func() (bool, string) {
		d.requireRunning()
		dup, mis := d.metric("drainer_enqueue_duplicates_total"), d.metric("drainer_enqueue_mismatches_total")
		return dup >= 1 && mis >= 1, fmt.Sprintf("duplicates %v, mismatches %v", dup, mis)
	})
	d.signal(syscall.SIGTERM)
	if code := d.exitCode(30 * time.Second); code != 0 {
		t.Errorf("drainer run as the runtime role exited %d after SIGTERM, want 0", code)
	}
	logs := d.stderr.String()
	for _, bad := range []string{"permission denied", "42501", "must be owner"} {
		if i := strings.Index(logs, bad); i >= 0 {
			t.Errorf("the daemon's log shows %q: …%s…", bad, logs[max(0, i-300):min(len(logs), i+200)])
		}
	}
	if n := strings.Count(logs, "level=ERROR"); n > 0 {
		t.Logf("the daemon logged %d error(s) (the compensation failing on purpose logs one):\n%s", n, secGrep(logs, "level=ERROR"))
	}

	// What the roles cannot do.
	denied := func(who string, conn *pgx.Conn, stmts ...string) {
		t.Helper()
		for _, stmt := range stmts {
			_, err := conn.Exec(ctx, stmt)
			if code := secPgCode(err); code != "42501" {
				t.Errorf("%s: %s: err %v (SQLSTATE %q), want 42501 insufficient privilege", who, stmt, err, code)
			}
		}
	}
	someKey := bookA.Key()
	denied("producer", producer,
		`UPDATE drainer.outbox SET payload = '{"seat":"1A"}' WHERE key = '`+someKey+`'`,
		`UPDATE drainer.outbox SET attempts = 0 WHERE key = '`+someKey+`'`,
		`UPDATE drainer.outbox SET next_attempt_at = now() WHERE key = '`+someKey+`'`,
		`UPDATE drainer.outbox SET response = '{}' WHERE key = '`+someKey+`'`,
		`UPDATE drainer.outbox SET tool_name = 'other' WHERE key = '`+someKey+`'`,
		`UPDATE drainer.outbox SET status = 'succeeded', updated_at = now() WHERE key = '`+someKey+`'`,
		`INSERT INTO drainer.outbox (key, agent_run_id, step_id, tool_name, payload, payload_hash, status)
		    VALUES ('k', 'r', 's', 't', '{}', '\x00', 'succeeded')`,
		`DELETE FROM drainer.outbox WHERE key = '`+someKey+`'`,
		`TRUNCATE drainer.queue`,
		`TRUNCATE drainer.intents`,
		`UPDATE drainer.queue SET status = 'succeeded'`,
		`SELECT payload FROM drainer.intents LIMIT 1`,
		`SELECT payload FROM drainer.outbox LIMIT 1`,
		`SELECT status FROM drainer.outbox LIMIT 1`,
		`SELECT final_status FROM drainer.tombstones LIMIT 1`,
		`INSERT INTO drainer.runs (agent_run_id, abort_reason, aborted_by) VALUES ('run-x', 'x', 'operator:someone')`,
		`INSERT INTO drainer.audit (key, at, event, actor, hash) VALUES ('`+someKey+`', now(), 'note', 'someone', '\x00')`,
		`SELECT drainer.audit_append('run:run-a', 'note', 'forged')`,
		`SELECT drainer.abort_run_internal('run-a', 'x', 'operator:someone')`,
		`SELECT drainer.count_enqueue_duplicate()`,
		`SELECT * FROM drainer.outbox LIMIT 1`,
		`SELECT * FROM drainer.pauses`,
		`INSERT INTO drainer.pauses (target, name, paused_by) VALUES ('route', 'held', 'x')`,
		`SELECT * FROM drainer.backlog_snapshot`,
		`SELECT abort_reason FROM drainer.runs`,
		`UPDATE drainer.runs SET saga_state = 'done'`,
		`DELETE FROM drainer.runs`,
		`SELECT actor, reason FROM drainer.audit`,
		`UPDATE drainer.audit SET actor = 'x'`,
		`DELETE FROM drainer.audit`,
		`DELETE FROM drainer.tombstones`,
		`INSERT INTO drainer.tombstones (key, payload_hash, final_status) VALUES ('k', '\x00', 'succeeded')`,
		`SELECT * FROM drainer.schema_version`,
		`SELECT * FROM drainer.sagas`,
		`SELECT nextval('drainer.enqueue_duplicates')`,
		`SELECT drainer.prune_rows('succeeded', now(), 10)`,
		`SELECT drainer.rotate_audit(interval '1 hour', interval '1 hour')`,
		`SELECT drainer.rotate_queue(1, 1, interval '1 hour', 1)`,
		`TRUNCATE drainer.audit_p1`,
		`CREATE TABLE drainer.x (i int)`,
	)
	runtime := r.connect(t, r.runtimeURL)
	t.Cleanup(func() { runtime.Close(context.Background()) })
	denied("runtime", runtime,
		`CREATE TABLE drainer.x (i int)`,
		`CREATE FUNCTION drainer.f() RETURNS int LANGUAGE sql AS 'SELECT 1'`,
		`ALTER TABLE drainer.outbox ADD COLUMN x int`,
		`DROP VIEW drainer.outbox`,
		`DROP TABLE drainer.queue`,
		`DROP TABLE drainer.intents`,
		`DROP TRIGGER queue_audit_update ON drainer.queue`,
		`ALTER TABLE drainer.queue DISABLE TRIGGER queue_audit_update`,
		`DROP TRIGGER outbox_write ON drainer.outbox`,
		`TRUNCATE drainer.queue`,
		`TRUNCATE drainer.intents`,
		`TRUNCATE drainer.audit`,
		`UPDATE drainer.audit SET actor = 'x'`,
		`INSERT INTO drainer.audit (key, at, event, actor, hash) VALUES ('`+someKey+`', now(), 'note', 'someone', '\x00')`,
		`UPDATE drainer.schema_meta SET value = '99'`,
		`DELETE FROM drainer.schema_version`,
		`SELECT nextval('drainer.enqueue_duplicates')`,
		`TRUNCATE drainer.audit_p1`,
		`UPDATE drainer.audit_generations SET current = false`,
	)
	// The retention pass turns the audit's generations as this role.
	var step string
	if err := runtime.QueryRow(context.Background(), `SELECT drainer.rotate_audit(interval '90 days', interval '30 days')`).Scan(&step); err != nil {
		t.Errorf("rotate_audit as the runtime role: %v", err)
	}
	if res := runCLI(t, operator, "migrate"); res.code != 1 || !strings.Contains(res.stderr, "permission denied") {
		t.Errorf("drainer migrate as the runtime role: %s\nwant exit 1, permission denied", res)
	}
	if res := runCLI(t, producerEnv, "list"); res.code != 1 || !strings.Contains(res.stderr, "permission denied") {
		t.Errorf("drainer list as the producer: %s\nwant exit 1, permission denied", res)
	}
}

// secGrep returns the lines of s containing sub.
func secGrep(s, sub string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// secDenied fails t unless err is SQLSTATE 42501 (insufficient privilege).
func secDenied(t *testing.T, what string, err error) {
	t.Helper()
	if code := secPgCode(err); code != "42501" {
		t.Errorf("%s: err %v (SQLSTATE %q), want 42501 insufficient privilege", what, err, code)
	}
}

// secAuditActors returns "<event> by <actor>" for each audit entry of key,
// oldest first.
func secAuditActors(t *testing.T, db *pgxpool.Pool, key string) []string {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT event || ' by ' || actor FROM drainer.audit WHERE key = $1 ORDER BY id`, key)
	if err != nil {
		t.Fatal(err)
	}
	actors, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return actors
}

// TestSecurityProducerNeedsOnlyExecute checks the producer role of
// deploy/sql/roles.sql: drainer.enqueue, drainer.result and drainer.abort_run
// run with the owner's rights (SECURITY DEFINER, search_path pinned), so the
// role holds USAGE on the schema and EXECUTE on those three and nothing else.
// It cannot set a row's status, insert a row or append an audit entry
// directly; an enqueue racing a prune answers created = false; abort_run
// works; and the audit still names the caller, as it did when the functions
// ran with the caller's rights.
func TestSecurityProducerNeedsOnlyExecute(t *testing.T) {
	t.Parallel()
	r := newSecRoles(t)
	ctx := context.Background()
	admin := r.admin
	producer := r.connect(t, r.producerURL)
	t.Cleanup(func() { producer.Close(context.Background()) })

	t.Run("grants", func(t *testing.T) {
		// No privilege on any table, view or sequence of the schema.
		var held []string
		rows, err := admin.Query(ctx, `SELECT c.relname || ' (' || c.relkind::text || ')' FROM pg_class c
		    WHERE c.relnamespace = 'drainer'::regnamespace AND c.relkind IN ('r', 'v', 'S', 'p', 'm')
		      AND (CASE WHEN c.relkind = 'S' THEN has_sequence_privilege($1, c.oid, 'USAGE, SELECT, UPDATE')
		                ELSE has_table_privilege($1, c.oid, 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')
		                     OR has_any_column_privilege($1, c.oid, 'SELECT, INSERT, UPDATE, REFERENCES') END)
		    ORDER BY 1`, r.producer)
		if err != nil {
			t.Fatal(err)
		}
		if held, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			t.Fatal(err)
		}
		if len(held) > 0 {
			t.Errorf("the producer role holds privileges on %v", held)
		}
		// Every function that runs with the owner's rights pins its
		// search_path and, unless it is a trigger function (never called
		// directly), is not executable by PUBLIC; the producer may run
		// exactly its four.
		type fn struct {
			name, config            string
			trigger, public, byProd bool
		}
		rows, err = admin.Query(ctx, `SELECT p.oid::regprocedure::text, coalesce(array_to_string(p.proconfig, ';'), ''),
		        p.prorettype = 'trigger'::regtype,
		        EXISTS (SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
		                 WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE'),
		        has_function_privilege($1, p.oid, 'EXECUTE')
		    FROM pg_proc p WHERE p.pronamespace = 'drainer'::regnamespace AND p.prosecdef ORDER BY 1`, r.producer)
		if err != nil {
			t.Fatal(err)
		}
		definers, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (fn, error) {
			var f fn
			return f, row.Scan(&f.name, &f.config, &f.trigger, &f.public, &f.byProd)
		})
		if err != nil {
			t.Fatal(err)
		}
		producerFns := []string{"drainer.abort_run(text,text)", "drainer.enqueue(text,text,text,text,jsonb,text)",
			"drainer.enqueue_batch(text[],text[],text[],text[],jsonb[],text[])", "drainer.result(text)"}
		var byProducer []string
		for _, f := range definers {
			// The search_path is pinned; jit=off and the completion's
			// generic plan are the only other settings.
			config := strings.TrimPrefix(strings.TrimSuffix(f.config, ";jit=off"), "plan_cache_mode=force_generic_plan;")
			if config != "search_path=drainer, pg_catalog, pg_temp" && config != "search_path=pg_catalog" {
				t.Errorf("SECURITY DEFINER %s: settings %q, want search_path pinned", f.name, f.config)
			}
			if f.public && !f.trigger {
				t.Errorf("SECURITY DEFINER %s: executable by PUBLIC", f.name)
			}
			if f.byProd && !f.trigger {
				byProducer = append(byProducer, f.name)
			}
		}
		slices.Sort(byProducer)
		if !slices.Equal(byProducer, producerFns) {
			t.Errorf("the producer may run SECURITY DEFINER functions %v, want %v", byProducer, producerFns)
		}
	})

	t.Run("cannot_write_directly", func(t *testing.T) {
		key := secEnqueue(t, producer, idemkey.Tuple{AgentRunID: "direct-run", StepID: "1", ToolName: "charge", BusinessScope: "acct-1"}, `{"n":1}`)
		for _, stmt := range []string{
			`UPDATE drainer.outbox SET status = 'succeeded', updated_at = now() WHERE key = $1`,
			`UPDATE drainer.outbox SET status = 'cancelled', cancel_cause = 'run_aborted', last_error = 'x', updated_at = now() WHERE key = $1`,
			`INSERT INTO drainer.outbox (key, agent_run_id, step_id, tool_name, business_scope, kind, payload, payload_hash, status)
			    VALUES ($1 || 'x', 'direct-run', '2', 'charge', '', 'forward', '{}', '\x00', 'succeeded')`,
			// An entry under another actor with a valid hash, which audit
			// verify would accept.
			`INSERT INTO drainer.audit (key, at, event, actor, reason, prev_hash, hash)
			    SELECT $1, now(), 'note', 'someone-else', 'forged', drainer.audit_head($1),
			           drainer.audit_hash(drainer.audit_head($1), $1, now(), 'note', NULL, NULL, NULL, NULL, 'someone-else', 'forged', NULL)`,
			`SELECT drainer.audit_append($1, 'note', 'forged')`,
			`SELECT drainer.abort_run_internal('direct-run', $1, 'operator:someone-else')`,
		} {
			_, err := producer.Exec(ctx, stmt, key)
			secDenied(t, stmt, err)
		}
		var status string
		if err := admin.QueryRow(ctx, `SELECT status FROM drainer.outbox WHERE key = $1`, key).Scan(&status); err != nil || status != "pending" {
			t.Errorf("row %s: status %q (%v), want it still pending", key, status, err)
		}
		if got := secAuditActors(t, admin, key); !slices.Equal(got, []string{"enqueued by db:" + r.producer}) {
			t.Errorf("audit of %s: %q, want only its enqueue by db:%s", key, got, r.producer)
		}
		if res := runCLI(t, nil, "audit", "verify", "--database-url", r.runtimeURL); res.code != 0 {
			t.Errorf("drainer audit verify: %s", res)
		}
	})

	t.Run("abort_run", func(t *testing.T) {
		pending := secEnqueue(t, producer, idemkey.Tuple{AgentRunID: "abort-run", StepID: "1", ToolName: "charge"}, `{"n":1}`)
		var cancelled int
		if err := producer.QueryRow(ctx, `SELECT drainer.abort_run('abort-run', 'wrong result')`).Scan(&cancelled); err != nil || cancelled != 1 {
			t.Fatalf("drainer.abort_run as the producer: %d cancelled (%v), want 1", cancelled, err)
		}
		var status, lastError string
		if err := producer.QueryRow(ctx, `SELECT status, last_error FROM drainer.result($1)`, pending).Scan(&status, &lastError); err != nil ||
			status != "cancelled" || lastError != "run aborted: wrong result" {
			t.Errorf("result of the aborted run's row: %q %q (%v), want cancelled by the abort", status, lastError, err)
		}
		// Again: nothing left to cancel; the first abort's record stays.
		if err := producer.QueryRow(ctx, `SELECT drainer.abort_run('abort-run', 'again')`).Scan(&cancelled); err != nil || cancelled != 0 {
			t.Errorf("drainer.abort_run again: %d cancelled (%v), want 0", cancelled, err)
		}
		var by, reason string
		if err := admin.QueryRow(ctx, `SELECT aborted_by, abort_reason FROM drainer.runs WHERE agent_run_id = 'abort-run'`).Scan(&by, &reason); err != nil {
			t.Fatal(err)
		}
		if by != "agent:"+r.producer || reason != "wrong result" {
			t.Errorf("run aborted by %q for %q, want agent:%s for the first reason", by, reason, r.producer)
		}
		want := []string{"enqueued by db:" + r.producer, "cancelled by db:" + r.producer}
		if got := secAuditActors(t, admin, pending); !slices.Equal(got, want) {
			t.Errorf("audit of %s: %q, want %q", pending, got, want)
		}
		// An enqueue into the aborted run is created cancelled.
		var created bool
		var late string
		if err := producer.QueryRow(ctx, `SELECT key, created FROM drainer.enqueue('abort-run', '2', 'charge', '', '{}')`).Scan(&late, &created); err != nil || !created {
			t.Fatalf("enqueue into the aborted run: created %v (%v)", created, err)
		}
		if err := producer.QueryRow(ctx, `SELECT status FROM drainer.result($1)`, late).Scan(&status); err != nil || status != "cancelled" {
			t.Errorf("row enqueued into the aborted run: %q (%v), want cancelled", status, err)
		}
	})

	t.Run("attribution_under_set_role", func(t *testing.T) {
		// A session that SET ROLEs to the producer is named after it, as
		// current_user named it before the functions ran as their owner.
		tx, err := admin.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+pgx.Identifier{r.producer}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		var key string
		if err := tx.QueryRow(ctx, `SELECT key FROM drainer.enqueue('set-role-run', '1', 'charge', '', '{}')`).Scan(&key); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `SELECT drainer.abort_run('set-role-run', 'x')`); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "RESET ROLE"); err != nil {
			t.Fatal(err)
		}
		var actors []string
		var by string
		err = tx.QueryRow(ctx, `SELECT array_agg(actor ORDER BY id), (SELECT aborted_by FROM drainer.runs WHERE agent_run_id = 'set-role-run')
		    FROM drainer.audit WHERE key = $1`, key).Scan(&actors, &by)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(actors, []string{"db:" + r.producer, "db:" + r.producer}) || by != "agent:"+r.producer {
			t.Errorf("under SET ROLE: audit actors %q, aborted by %q; want db:%s and agent:%s", actors, by, r.producer, r.producer)
		}
	})

	t.Run("daemon_attribution_unchanged", func(t *testing.T) {
		// The daemon's connections (application_name=drainer) are "drainer",
		// also for the abort that a failed forward row triggers, which runs
		// with the owner's rights.
		first := secEnqueue(t, producer, idemkey.Tuple{AgentRunID: "fail-run", StepID: "1", ToolName: "charge"}, `{}`)
		second := secEnqueue(t, producer, idemkey.Tuple{AgentRunID: "fail-run", StepID: "2", ToolName: "charge"}, `{}`)
		cfg, err := pgx.ParseConfig(r.runtimeURL)
		if err != nil {
			t.Fatal(err)
		}
		cfg.RuntimeParams["application_name"] = "drainer"
		runtime, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer runtime.Close(ctx)
		if _, err := runtime.Exec(ctx, `UPDATE drainer.outbox SET status = 'failed', attempts = 1, last_error = 'declined', updated_at = now()
		    WHERE key = $1`, first); err != nil {
			t.Fatalf("the runtime role fails a forward row: %v", err)
		}
		var by string
		if err := admin.QueryRow(ctx, `SELECT aborted_by FROM drainer.runs WHERE agent_run_id = 'fail-run'`).Scan(&by); err != nil || by != "drainer" {
			t.Errorf("run of the failed row: aborted by %q (%v), want drainer", by, err)
		}
		if got, want := secAuditActors(t, admin, first), []string{"enqueued by db:" + r.producer, "failed by drainer"}; !slices.Equal(got, want) {
			t.Errorf("audit of the failed row: %q, want %q", got, want)
		}
		if got, want := secAuditActors(t, admin, second), []string{"enqueued by db:" + r.producer, "cancelled by drainer"}; !slices.Equal(got, want) {
			t.Errorf("audit of the row its abort cancelled: %q, want %q", got, want)
		}
	})

	t.Run("enqueue_prune_race_answers_existing", func(t *testing.T) {
		// drainer.enqueue of a tuple whose row a prune moves to the
		// tombstones at that very moment deletes the row it just inserted
		// and answers created = false (docs/reference.md §2), under the producer role.
		tp := idemkey.Tuple{AgentRunID: "race-run", StepID: "1", ToolName: "charge", BusinessScope: "acct-1"}
		key := secEnqueue(t, producer, tp, `{"amount_cents":100}`)
		if _, err := admin.Exec(ctx, `UPDATE drainer.outbox SET status = 'succeeded' WHERE key = $1`, key); err != nil {
			t.Fatal(err)
		}
		tx, err := admin.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		var pruned int
		if err := tx.QueryRow(ctx, `SELECT drainer.prune_rows('succeeded', now() + interval '1 hour', 1000)`).Scan(&pruned); err != nil || pruned < 1 {
			t.Fatalf("prune_rows: %d (%v), want at least 1", pruned, err)
		}
		type answer struct {
			key     string
			created bool
			err     error
		}
		done := make(chan answer, 1)
		go func() {
			var a answer
			a.err = producer.QueryRow(ctx, `SELECT key, created FROM drainer.enqueue($1, $2, $3, $4, $5::jsonb)`,
				tp.AgentRunID, tp.StepID, tp.ToolName, tp.BusinessScope, `{"amount_cents":100}`).Scan(&a.key, &a.created)
			done <- a
		}()
		pid := producer.PgConn().PID()
		testkit.WaitFor(t, 30*time.Second, "the enqueue to wait for the prune", func() (bool, string) {
			var wait *string
			if err := r.admin.QueryRow(ctx, `SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&wait); err != nil {
				t.Fatal(err)
			}
			return wait != nil && *wait == "Lock", fmt.Sprint(strOrNilSec(wait))
		})
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		a := <-done
		if a.err != nil || a.key != key || a.created {
			t.Fatalf("enqueue racing the prune, as the producer: key %s created %v err %v; want %s, created = false", a.key, a.created, a.err, key)
		}
		var rows, tombstones int
		if err := admin.QueryRow(ctx, `SELECT (SELECT count(*) FROM drainer.outbox WHERE key = $1), (SELECT count(*) FROM drainer.tombstones WHERE key = $1)`,
			key).Scan(&rows, &tombstones); err != nil {
			t.Fatal(err)
		}
		if rows != 0 || tombstones != 1 {
			t.Errorf("after the race: %d rows and %d tombstones of %s, want only the tombstone", rows, tombstones, key)
		}
		var status string
		if err := producer.QueryRow(ctx, `SELECT status FROM drainer.result($1)`, key).Scan(&status); err != nil || status != "succeeded" {
			t.Errorf("result after the race: %q (%v), want succeeded", status, err)
		}
		if res := runCLI(t, nil, "audit", "verify", "--database-url", r.runtimeURL); res.code != 0 {
			t.Errorf("drainer audit verify after the race: %s", res)
		}
	})
}

// secRolesSQLRelease8 is what deploy/sql/roles.sql granted up to schema
// version 8, when the producer's functions ran with the caller's rights.
const secRolesSQLRelease8 = `
REVOKE ALL ON SCHEMA :"schema" FROM PUBLIC;
GRANT USAGE ON SCHEMA :"schema" TO :"runtime_role", :"producer_role";
GRANT SELECT ON TABLE :"schema".schema_version, :"schema".schema_meta, :"schema".sagas TO :"runtime_role";
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE :"schema".outbox, :"schema".runs, :"schema".tombstones TO :"runtime_role";
GRANT SELECT, INSERT, DELETE ON TABLE :"schema".audit, :"schema".pauses TO :"runtime_role";
GRANT UPDATE (id) ON TABLE :"schema".audit TO :"runtime_role";
GRANT SELECT, INSERT, UPDATE ON TABLE :"schema".audit_anchors, :"schema".backlog_snapshot TO :"runtime_role";
GRANT SELECT ON SEQUENCE :"schema".enqueue_duplicates, :"schema".enqueue_mismatches TO :"runtime_role";
GRANT INSERT (key, agent_run_id, step_id, tool_name, business_scope, kind, payload, payload_hash,
              status, cancel_cause, last_error, traceparent)
    ON TABLE :"schema".outbox TO :"producer_role";
GRANT SELECT (seq, key, payload_hash) ON TABLE :"schema".outbox TO :"producer_role";
GRANT SELECT (key, payload_hash, final_status) ON TABLE :"schema".tombstones TO :"producer_role";
GRANT SELECT (agent_run_id) ON TABLE :"schema".runs TO :"producer_role";
GRANT SELECT (key, id, hash), INSERT ON TABLE :"schema".audit TO :"producer_role";
GRANT SELECT (key, hash) ON TABLE :"schema".audit_anchors TO :"producer_role";
GRANT SELECT (status, response, last_error) ON TABLE :"schema".outbox TO :"producer_role";
GRANT INSERT (agent_run_id, abort_reason, aborted_by) ON TABLE :"schema".runs TO :"producer_role";
GRANT SELECT (agent_run_id, kind, attempts) ON TABLE :"schema".outbox TO :"producer_role";
GRANT UPDATE (status, cancel_cause, last_error, updated_at) ON TABLE :"schema".outbox TO :"producer_role";
`

// TestSecurityUpgradeKeepsRolesWorking upgrades a schema at version 8, with
// the grants deploy/sql/roles.sql gave then, to the producer functions that
// run with the owner's rights: between `drainer migrate` and applying the
// new roles.sql, the producer still enqueues, reads results and aborts runs,
// and the runtime role still aborts and fails rows (expand/contract). The
// new roles.sql then takes back the producer's table privileges and the
// runtime role's INSERT on the audit. roles.sql refuses to run before the
// migration.
func TestSecurityUpgradeKeepsRolesWorking(t *testing.T) {
	t.Parallel()
	r := createSecRoles(t)
	ctx := context.Background()
	admin := r.admin

	// Schema version 8, as the owner, the way drainer migrate applies it.
	owner := r.connect(t, r.ownerURL)
	if _, err := owner.Exec(ctx, "CREATE SCHEMA drainer"); err != nil {
		t.Fatal(err)
	}
	m, err := migrate.NewMigrator(ctx, owner, "drainer.schema_version")
	if err != nil {
		t.Fatal(err)
	}
	m.Data["schema"] = "drainer"
	if err := m.LoadMigrations(os.DirFS("../migrations")); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, 8); err != nil {
		t.Fatal(err)
	}
	owner.Close(ctx)
	if err := r.applyGrants(secRolesSQLRelease8); err != nil {
		t.Fatalf("the grants of schema version 8: %v", err)
	}
	raw, err := os.ReadFile(secRolesSQL)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.applyGrants(string(raw)); err == nil || !strings.Contains(err.Error(), "run drainer migrate first") {
		t.Errorf("%s on schema version 8: %v, want it refused", secRolesSQL, err)
	}

	producer := r.connect(t, r.producerURL)
	t.Cleanup(func() { producer.Close(context.Background()) })
	operator := []string{"DRAINER_DATABASE_URL=" + r.runtimeURL, "USER=sec-operator"}
	before := secEnqueue(t, producer, idemkey.Tuple{AgentRunID: "up-run", StepID: "1", ToolName: "charge"}, `{}`)

	if res := runCLI(t, nil, "migrate", "--database-url", r.ownerURL); res.code != 0 {
		t.Fatalf("drainer migrate as the owner: %s", res)
	}

	// What the roles do, on the new schema with the old grants, then with
	// the new ones.
	works := func(stage string) {
		t.Helper()
		tp := idemkey.Tuple{AgentRunID: "up-run-" + stage, StepID: "1", ToolName: "charge"}
		key := secEnqueue(t, producer, tp, `{}`)
		var created bool
		if err := producer.QueryRow(ctx, `SELECT created FROM drainer.enqueue($1, $2, $3, $4, '{}')`,
			tp.AgentRunID, tp.StepID, tp.ToolName, tp.BusinessScope).Scan(&created); err != nil || created {
			t.Errorf("%s: enqueue again as the producer: created %v (%v)", stage, created, err)
		}
		var status string
		if err := producer.QueryRow(ctx, `SELECT status FROM drainer.result($1)`, before).Scan(&status); err != nil {
			t.Errorf("%s: drainer.result as the producer: %v", stage, err)
		}
		var n int
		if err := producer.QueryRow(ctx, `SELECT drainer.abort_run($1, 'changed its mind')`, tp.AgentRunID).Scan(&n); err != nil || n != 1 {
			t.Errorf("%s: drainer.abort_run as the producer: %d (%v), want 1", stage, n, err)
		}
		other := secEnqueue(t, producer, idemkey.Tuple{AgentRunID: "up-op-" + stage, StepID: "1", ToolName: "charge"}, `{}`)
		if res := runCLI(t, operator, "abort", "up-op-"+stage, "--reason", "operator says"); res.code != 0 {
			t.Errorf("%s: drainer abort as the runtime role: %s", stage, res)
		}
		if err := producer.QueryRow(ctx, `SELECT status FROM drainer.result($1)`, other).Scan(&status); err != nil || status != "cancelled" {
			t.Errorf("%s: row of the run the operator aborted: %q (%v)", stage, status, err)
		}
		failing := secEnqueue(t, producer, idemkey.Tuple{AgentRunID: "up-fail-" + stage, StepID: "1", ToolName: "charge"}, `{}`)
		runtime := r.connect(t, r.runtimeURL)
		defer runtime.Close(ctx)
		if _, err := runtime.Exec(ctx, `UPDATE drainer.outbox SET status = 'failed', attempts = 1, updated_at = now() WHERE key = $1`, failing); err != nil {
			t.Errorf("%s: the runtime role fails a forward row: %v", stage, err)
		}
		if res := runCLI(t, operator, "audit", "verify"); res.code != 0 {
			t.Errorf("%s: drainer audit verify: %s", stage, res)
		}
		if got := secAuditActors(t, admin, key); len(got) != 2 || got[0] != "enqueued by db:"+r.producer || got[1] != "cancelled by db:"+r.producer {
			t.Errorf("%s: audit of %s: %q", stage, key, got)
		}
	}
	works("old-grants")

	r.applyRolesSQL(t)
	works("new-grants")
	runtime := r.connect(t, r.runtimeURL)
	t.Cleanup(func() { runtime.Close(context.Background()) })
	for _, c := range []struct {
		who  string
		conn *pgx.Conn
		stmt string
	}{
		{"producer", producer, `UPDATE drainer.outbox SET status = 'succeeded' WHERE key = $1`},
		{"producer", producer, `SELECT payload_hash FROM drainer.outbox WHERE key = $1`},
		{"producer", producer, `INSERT INTO drainer.audit (key, at, event, actor, hash) VALUES ($1, now(), 'note', 'x', '\x00')`},
		{"producer", producer, `SELECT drainer.audit_append($1, 'note', 'forged')`},
		{"producer", producer, `SELECT drainer.abort_run_internal('up-run', $1, 'operator:someone-else')`},
		{"runtime", runtime, `INSERT INTO drainer.audit (key, at, event, actor, hash) VALUES ($1, now(), 'note', 'x', '\x00')`},
		{"runtime", runtime, `SELECT * FROM drainer.result($1)`},
	} {
		_, err := c.conn.Exec(ctx, c.stmt, before)
		secDenied(t, c.who+": "+c.stmt, err)
	}
}

// TestSecurityRolesKnownGaps keeps the "Known gaps" of docs/security.md
// true. A failure here means the product changed: update the document (and
// deploy/sql/roles.sql).
func TestSecurityRolesKnownGaps(t *testing.T) {
	t.Parallel()
	r := newSecRoles(t)
	ctx := context.Background()
	producer := r.connect(t, r.producerURL)
	t.Cleanup(func() { producer.Close(context.Background()) })

	t.Run("producer_labels_its_own_entries", func(t *testing.T) {
		// The audit's actor comes from session settings, drainer.actor
		// (operator commands) and application_name=drainer (the daemon),
		// which any session can set: a producer can put another name on
		// the entries of its own changes.
		tx, err := producer.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `SELECT set_config('drainer.actor', 'someone-else', true)`); err != nil {
			t.Fatal(err)
		}
		key := secEnqueue(t, tx, idemkey.Tuple{AgentRunID: "label-run", StepID: "1", ToolName: "charge"}, `{}`)
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if got := secAuditActors(t, r.admin, key); !slices.Equal(got, []string{"enqueued by someone-else"}) {
			t.Errorf("audit of an enqueue under drainer.actor = someone-else: %q; the gap is closed: update docs/security.md", got)
		}
	})

	t.Run("xmin_horizon_needs_pg_read_all_stats", func(t *testing.T) {
		// drainer_db_xmin_horizon_age_seconds reads pg_stat_activity, which
		// hides other roles' transactions from the runtime role.
		tx, err := producer.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
			t.Fatal(err)
		}
		runtime := r.connect(t, r.runtimeURL)
		defer runtime.Close(ctx)
		visible := func() bool {
			t.Helper()
			var v bool
			if err := runtime.QueryRow(ctx, `SELECT backend_xmin IS NOT NULL AND xact_start IS NOT NULL FROM pg_stat_activity WHERE pid = $1`,
				producer.PgConn().PID()).Scan(&v); err != nil {
				t.Fatal(err)
			}
			return v
		}
		if visible() {
			t.Errorf("the runtime role sees another role's transaction without pg_read_all_stats; update docs/security.md")
		}
		if _, err := r.admin.Exec(ctx, "GRANT pg_read_all_stats TO "+pgx.Identifier{r.runtime}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		if !visible() {
			t.Errorf("with pg_read_all_stats the runtime role still does not see the producer's transaction")
		}
	})
}

// TestSecurityDocShowsRolesSQL: docs/security.md shows deploy/sql/roles.sql
// verbatim, so the documented GRANTs are the tested ones.
func TestSecurityDocShowsRolesSQL(t *testing.T) {
	t.Parallel()
	roles, err := os.ReadFile(secRolesSQL)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join("..", "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)```sql\n(-- drainer: least-privilege grants.*?)```")
	m := block.FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/security.md has no ```sql block starting with the first line of deploy/sql/roles.sql")
	}
	if string(m[1]) != string(roles) {
		t.Errorf("the GRANTs in docs/security.md differ from %s; copy the file into the document", secRolesSQL)
	}
}
