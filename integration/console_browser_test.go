//go:build integration

package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/idemkey"
	"github.com/drainer-io/drainer/producer"
	"github.com/drainer-io/drainer/tooling/mockprovider"
	"github.com/drainer-io/drainer/tooling/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// consoleBrowserDir holds the browser script and its locked dependency
// (npm playwright-core, installed by `make test`).
const consoleBrowserDir = "testdata/console-browser"

// chromiumPath is Debian's chromium, installed by `make test` when missing.
const chromiumPath = "/usr/bin/chromium"

// TestConsoleInBrowser runs `drainer run --console-addr` and drives its
// console in a real browser (testdata/console-browser/console.test.js):
// every page loads with no console error and no request leaving the host;
// an action without the token and a cross-site POST are refused; a key is
// searched and its attempts shown; an outcome_unknown row is resolved; a
// paused route is resumed and seen draining; a bulk requeue shows its dry
// run before Confirm, and its answer, a page of its own, reloads without
// acting again; the requeued rows' tool, which has no route, is flagged on
// the overview, whose chart has labelled axes. The database is checked
// afterwards. Screenshots go
// to DRAINER_CONSOLE_SCREENSHOTS when set (docs/console/), else to a
// temporary directory.
func TestConsoleInBrowser(t *testing.T) {
	for _, need := range []string{chromiumPath, filepath.Join(consoleBrowserDir, "node_modules", "playwright-core")} {
		if _, err := os.Stat(need); err != nil {
			t.Fatalf("%s is missing: `make test` installs chromium (apt) and playwright-core (npm ci in %s): %v", need, consoleBrowserDir, err)
		}
	}
	dbURL, pool := newMigratedDB(t)
	provider := mockprovider.New(mockprovider.Config{Seed: 7})
	baseURL, err := provider.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(provider.Close)

	const token = "console-browser-test-token"
	cfg := fmt.Sprintf(`workers: 8
lease: 15s
unrouted_recheck: 1s
console:
  actions: true
  token: ${env:CONSOLE_TOKEN}
adapters:
  provider: {type: http, url: "%s/{tool_name}", timeout: 5s}
routes:
  charge_card: {adapter: provider, compensation: refund_card, max_attempts: 20, backoff: {base: 50ms, cap: 500ms}}
  reserve_stock: {adapter: provider, compensation: release_stock, max_attempts: 20, backoff: {base: 50ms, cap: 500ms}}
  refund_card: {adapter: provider, max_attempts: 20, backoff: {base: 50ms, cap: 500ms}}
  release_stock: {adapter: provider, max_attempts: 20, backoff: {base: 50ms, cap: 500ms}}
  send_email: {adapter: provider, max_attempts: 20, backoff: {base: 50ms, cap: 500ms}}
`, baseURL)
	cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", cfg)
	if res := runCLI(t, nil, "pause", "send_email", "--reason", "provider maintenance", "--actor", "ops-bot", "--database-url", dbURL); res.code != 0 {
		t.Fatalf("drainer pause: %s", res)
	}
	search := consoleEnqueue(t, pool, "run-console-1", "charge_card", 40)[0]
	saga := append(consoleEnqueue(t, pool, "run-saga", "reserve_stock", 1), consoleEnqueue(t, pool, "run-saga", "charge_card", 1)...)
	paused := consoleEnqueue(t, pool, "run-console-2", "send_email", 6)
	bulk := consoleEnqueue(t, pool, "run-console-3", "refund_payment", 3) // no route: stays as set
	unknown := consoleEnqueue(t, pool, "run-console-4", "ship_order", 1)[0]
	victim := consoleEnqueue(t, pool, "run-console-5", "close_account", 1)[0]
	// One statement on the queue, so that the three rows of the run fail
	// together before the first failure's trigger aborts the run.
	mustExec(t, pool, `UPDATE drainer.queue q SET status = 'failed', attempts = 20, first_attempt_at = now(),
	    last_error = '422 Unprocessable Entity: card declined' FROM drainer.intents i WHERE q.seq = i.seq AND i.key = ANY($1)`, bulk)
	mustExec(t, pool, `UPDATE drainer.outbox SET status = 'outcome_unknown', attempts = 1, first_attempt_at = now(),
	    last_error = 'connection reset after the request was sent' WHERE key = $1`, unknown)

	consoleAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	d := startDaemonEnv(t, "console", []string{"CONSOLE_TOKEN=" + token},
		"--config", cfgPath, "--database-url", dbURL, "--console-addr", consoleAddr)
	d.waitReady(time.Minute)
	testkit.WaitFor(t, time.Minute, "the searched row and the saga's steps to succeed", func() (bool, string) {
		d.requireRunning()
		var st []string
		for _, k := range append([]string{search}, saga...) {
			st = append(st, readRow(t, pool, k).Status)
		}
		return strings.Count(strings.Join(st, " "), "succeeded") == len(st), strings.Join(st, " ")
	})
	// The agent undoes run-saga: its compensations run in reverse order.
	if res := runCLI(t, nil, "abort", "run-saga", "--reason", "the agent booked the wrong customer", "--database-url", dbURL); res.code != 0 {
		t.Fatalf("drainer abort: %s", res)
	}
	testkit.WaitFor(t, time.Minute, "the saga of run-saga to compensate both steps", func() (bool, string) {
		d.requireRunning()
		a, b := readRow(t, pool, saga[0]).Status, readRow(t, pool, saga[1]).Status
		return a == "compensated" && b == "compensated", a + " " + b
	})

	// A page on another origin that posts to the console.
	attacker := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>prize</title><form method="post" action="http://%s/api/v1/actions/cancel">
<input type="hidden" name="key" value="%s"><button type="submit">Win a prize</button></form>`, consoleAddr, victim)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go attacker.Serve(ln)
	t.Cleanup(func() { attacker.Close() })

	shots := os.Getenv("DRAINER_CONSOLE_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "console.test.js")
	cmd.Dir = consoleBrowserDir
	cmd.Env = append(childEnv(),
		"CONSOLE_URL=http://"+consoleAddr, "CONSOLE_TOKEN="+token, "ATTACKER_URL=http://"+ln.Addr().String()+"/",
		"KEY_SEARCH="+search, "KEY_UNKNOWN="+unknown, "KEY_VICTIM="+victim, "RUN_ID=run-saga",
		"PAUSED_TOOL=send_email", "BULK_TOOL=refund_payment", "SCREENSHOTS="+shots, "CHROMIUM="+chromiumPath)
	out, err := cmd.CombinedOutput()
	t.Logf("browser:\n%s", out)
	if err != nil {
		t.Fatalf("the browser script failed: %v", err)
	}
	if n := strings.Count(string(out), "PASS "); n != 10 {
		t.Errorf("%d checks passed, want 10", n)
	}

	// What the browser did, as the database saw it.
	if r := readRow(t, pool, unknown); r.Status != "succeeded" {
		t.Errorf("the resolved row is %s, want succeeded", r.Status)
	}
	var actor string
	if err := pool.QueryRow(context.Background(), `SELECT actor FROM drainer.audit WHERE key = $1 ORDER BY id DESC LIMIT 1`, unknown).Scan(&actor); err != nil || actor != "console:alice" {
		t.Errorf("the resolve was audited as %q (%v), want console:alice", actor, err)
	}
	// The bulk-requeued rows and the attack's target have no route: the
	// daemon claims them now and then and hands them back unsent (pending,
	// the attempt given back), so they are read once that is done.
	testkit.WaitFor(t, time.Minute, "the bulk-requeued rows pending with 0 attempts", func() (bool, string) {
		d.requireRunning()
		var st []string
		done := true
		for _, k := range bulk {
			r := readRow(t, pool, k)
			st = append(st, fmt.Sprintf("%s/%d", r.Status, r.Attempts))
			done = done && r.Status == "pending" && r.Attempts == 0
		}
		return done, strings.Join(st, " ")
	})
	for _, k := range paused {
		if r := readRow(t, pool, k); r.Status != "succeeded" {
			t.Errorf("row %s of the resumed route is %s, want succeeded", k, r.Status)
		}
	}
	testkit.WaitFor(t, time.Minute, "the cross-site POST's target to be pending", func() (bool, string) {
		d.requireRunning()
		r := readRow(t, pool, victim)
		if r.Status != "pending" && r.Status != "in_flight" {
			t.Fatalf("the cross-site POST changed its row to %s", r.Status)
		}
		return r.Status == "pending", r.Status
	})
	for _, name := range []string{"overview", "overview-drained", "rows", "row-resolve", "row-attempts", "run", "parked", "pauses", "login", "notfound", "bulk-dry-run"} {
		if st, err := os.Stat(filepath.Join(shots, name+".png")); err != nil || st.Size() == 0 {
			t.Errorf("screenshot %s.png: %v", name, err)
		}
	}
}

// consoleEnqueue enqueues n steps of run for tool, each in its own scope
// and with a small payload, and returns their keys.
func consoleEnqueue(t *testing.T, pool *pgxpool.Pool, run, tool string, n int) []string {
	t.Helper()
	ins := make([]producer.Intent, n)
	for i := range ins {
		ins[i] = producer.Intent{
			Tuple:   idemkey.Tuple{AgentRunID: run, StepID: "step-" + strconv.Itoa(i), ToolName: tool, BusinessScope: fmt.Sprintf("customer-%d", i%5)},
			Payload: []byte(fmt.Sprintf(`{"customer":"customer-%d","amount_cents":%d,"currency":"EUR"}`, i%5, 1000+i)),
		}
	}
	var keys []string
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		res, err := producer.EnqueueBatchTx(context.Background(), tx, ins)
		for _, r := range res {
			keys = append(keys, r.Key)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func mustExec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// TestConsoleAddrInUse: a console address already taken ends `drainer run`
// with exit 2, naming the address.
func TestConsoleAddrInUse(t *testing.T) {
	t.Parallel()
	dbURL, _ := newMigratedDB(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfgPath := writeFile(t, t.TempDir(), "drainer.yaml", httpConfig("http://127.0.0.1:9", "", "charge_card"))
	d := startDaemon(t, "console-taken", "--config", cfgPath, "--database-url", dbURL, "--console-addr", ln.Addr().String())
	if code := d.exitCode(time.Minute); code != 2 {
		t.Fatalf("exit %d, want 2\n%s", code, d.stderr.String())
	}
	if out := d.stderr.String(); !strings.Contains(out, "--console-addr: console address "+ln.Addr().String()) {
		t.Errorf("the error does not name the flag and the console address %s:\n%s", ln.Addr(), out)
	}
}
