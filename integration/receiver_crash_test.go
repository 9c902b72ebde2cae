//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The probe that found five of 800 keys charged twice: a service behind the
// receiver killed with SIGKILL mid-request, and the retry taken over after
// the recovery timeout. Here each example service of examples/receiver is
// killed in the middle of an order (after writing it), and the retry goes to
// the example of another language on the same store, as a polyglot fleet
// would send it.

// exampleCommand builds the command that starts the example of lang with
// args.
type exampleCommand func(args ...string) *exec.Cmd

// crashExamples returns the three examples, ready to start.
func crashExamples(t *testing.T) map[string]exampleCommand {
	t.Helper()
	pyDir := pyRequireInterpreter(t)
	tsPrepareSDK(t)
	pyServer, err := filepath.Abs("../examples/receiver/python/server.py")
	if err != nil {
		t.Fatal(err)
	}
	tsServer, err := filepath.Abs("../examples/receiver/typescript/server.mjs")
	if err != nil {
		t.Fatal(err)
	}
	goBin := filepath.Join(t.TempDir(), "receiver-example")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", goBin, "github.com/drainer-io/drainer/examples/receiver/go").CombinedOutput(); err != nil {
		t.Fatalf("go build examples/receiver/go: %v\n%s", err, out)
	}
	return map[string]exampleCommand{
		"go": func(args ...string) *exec.Cmd { return exec.Command(goBin, args...) },
		"python": func(args ...string) *exec.Cmd {
			cmd := exec.Command(pyInterpreter, append([]string{pyServer}, args...)...)
			cmd.Dir = pyDir
			return cmd
		},
		"typescript": func(args ...string) *exec.Cmd { return exec.Command("node", append([]string{tsServer}, args...)...) },
	}
}

// withApplicationName returns dbURL with application_name set.
func withApplicationName(t *testing.T, dbURL, name string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// pollTrue polls a boolean query until it is true, for at most two minutes.
func pollTrue(t *testing.T, pool *pgxpool.Pool, what, query string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var ok bool
		if err := pool.QueryRow(context.Background(), query, args...).Scan(&ok); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 2 minutes for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// postOrder sends one order with key to base and returns its status and
// body (status 0 when the connection failed).
func postOrder(base, key string) (int, string) {
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/orders", strings.NewReader(`{"sku":"A-1","qty":2}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("X-Account", "acct-1")
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestReceiverExamplesKilledMidRequest: an example killed with SIGKILL
// after writing an order and before answering. With the order written in
// the receiver's transaction (the examples' default) the kill rolls back
// order and record, and the retry, sent at once to the example of another
// language, makes the order: one order. Written outside it, the order
// exists: after the recovery timeout the retry gets 409 outcome-unknown
// naming the key, no second order is made, and the retrying service
// reports the key (its log, drainer_receiver_abandoned_total).
func TestReceiverExamplesKilledMidRequest(t *testing.T) {
	t.Parallel()
	examples := crashExamples(t)
	for _, pair := range [][2]string{{"go", "python"}, {"python", "typescript"}, {"typescript", "go"}} {
		for _, inTx := range []bool{true, false} {
			victim, retrier := pair[0], pair[1]
			name := fmt.Sprintf("%s killed, %s retries, in transaction %v", victim, retrier, inTx)
			t.Run(name, func(t *testing.T) {
				dbURL := dbtest.NewDatabase(t)
				pool, err := pgxpool.New(t.Context(), dbURL)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(pool.Close)
				args := []string{"--addr", "127.0.0.1:0", "--recovery-timeout", "1s"}
				if !inTx {
					args = append(args, "--outside-transaction")
				}
				app := "killed-" + victim
				victimCmd := examples[victim](append(args, "--delay", "3600s")...)
				victimCmd.Env = append(childEnv(), "DATABASE_URL="+withApplicationName(t, dbURL, app),
					"PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
				victimURL := startExample(t, victimCmd)
				retrierCmd := examples[retrier](args...)
				retrierCmd.Env = append(childEnv(), "DATABASE_URL="+dbURL, "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
				retrierURL, logs := startExampleStderr(t, retrierCmd)

				const key = "order-5b7e"
				first := make(chan int, 1)
				go func() { code, _ := postOrder(victimURL, key); first <- code }()
				if inTx {
					// The order is inserted, uncommitted, in the victim's open transaction.
					pollTrue(t, pool, "the order written in the victim's transaction", `SELECT EXISTS (
						SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
						WHERE a.application_name = $1 AND l.relation = 'example_orders'::regclass AND l.mode = 'RowExclusiveLock')`, app)
				} else {
					pollTrue(t, pool, "the order written", `SELECT count(*) = 1 FROM example_orders`)
				}
				if err := victimCmd.Process.Kill(); err != nil { // SIGKILL, mid-request
					t.Fatal(err)
				}
				if code := <-first; code != 0 {
					t.Fatalf("the killed service answered %d", code)
				}
				pollTrue(t, pool, "the killed service's connections to end",
					`SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = $1`, app)

				if inTx {
					var orders, records int
					if err := pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM example_orders),
						(SELECT count(*) FROM drainer_receiver.records)`).Scan(&orders, &records); err != nil {
						t.Fatal(err)
					}
					if orders != 0 || records != 0 {
						t.Fatalf("after the kill: %d orders, %d records; want both rolled back", orders, records)
					}
					if code, body := postOrder(retrierURL, key); code != http.StatusCreated {
						t.Fatalf("the retry: %d %s, want 201 at once", code, body)
					}
				} else {
					pollTrue(t, pool, "the record's recovery deadline to pass",
						`SELECT coalesce(bool_and(locked_until < now()), false) FROM drainer_receiver.records`)
					for range 2 {
						code, body := postOrder(retrierURL, key)
						var p struct {
							Type string `json:"type"`
							Key  string `json:"idempotency_key"`
						}
						if code != http.StatusConflict || json.Unmarshal([]byte(body), &p) != nil ||
							p.Type != "https://drainer.dev/problems/outcome-unknown" || p.Key != key {
							t.Fatalf("the retry: %d %s, want 409 outcome-unknown naming %s", code, body, key)
						}
					}
					if _, metrics := httpGet(retrierURL + "/metrics"); !strings.Contains(metrics,
						`drainer_receiver_abandoned_total{outcome="outcome_unknown"} 1`) {
						t.Fatalf("%s /metrics:\n%s\nwant outcome_unknown counted once", retrier, metrics)
					}
					if !strings.Contains(logs.String(), key) {
						t.Fatalf("%s logged nothing naming the key:\n%s", retrier, logs.String())
					}
				}
				var orders int
				if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM example_orders`).Scan(&orders); err != nil {
					t.Fatal(err)
				}
				if orders != 1 {
					t.Fatalf("%d orders for one key, want 1", orders)
				}
			})
		}
	}
}
