//go:build integration

package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// The example receivers of examples/receiver, started as processes as a
// team would run them, must pass `drainer conformance` in both modes.

// listeningRE matches the line an example prints once it serves.
var listeningRE = regexp.MustCompile(`listening on (http://\S+)`)

// startExample starts cmd, waits (at most a minute) for its "listening on
// URL" line and returns the URL; a process that closes its output first
// (it exited) fails the test at once. The process is killed and waited for
// when the test ends; its output is shown if the test failed.
func startExample(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	u, _ := startExampleStderr(t, cmd)
	return u
}

// startExampleStderr is startExample that also returns what the process
// writes to stderr (its logs).
func startExampleStderr(t *testing.T, cmd *exec.Cmd) (string, *testkit.Buffer) {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &testkit.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	var out testkit.Buffer
	urls := make(chan string, 1)
	eof := make(chan struct{})
	go func() {
		defer close(eof)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			_, _ = out.Write([]byte(line + "\n"))
			if m := listeningRE.FindStringSubmatch(line); m != nil {
				select {
				case urls <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s output:\n%s\nstderr:\n%s", filepath.Base(cmd.Path), tail(out.String(), 4000), tail(stderr.String(), 4000))
		}
	})
	select {
	case u := <-urls:
		return u, stderr
	case <-eof:
		select {
		case u := <-urls:
			return u, stderr
		default:
		}
		time.Sleep(100 * time.Millisecond) // let stderr arrive
		t.Fatalf("%s exited before it printed \"listening on\"\nstdout:\n%s\nstderr:\n%s",
			strings.Join(cmd.Args, " "), tail(out.String(), 4000), tail(stderr.String(), 4000))
	case <-time.After(time.Minute):
		t.Fatalf("%s printed no \"listening on\" line within a minute\nstdout:\n%s\nstderr:\n%s",
			strings.Join(cmd.Args, " "), tail(out.String(), 4000), tail(stderr.String(), 4000))
	}
	return "", stderr
}

// exampleArgs are the flags every example takes (examples/receiver/README.md):
// a free port, the mode, each order held 200ms so a burst meets it in
// flight; in ietf mode the order is written in the transaction that writes
// the record (the examples' default), in seed mode outside it.
func exampleArgs(mode string) []string {
	args := []string{"--addr", "127.0.0.1:0", "--mode", mode, "--delay", "200ms"}
	if mode == "ietf" {
		args = append(args, "--in-transaction")
	} else {
		args = append(args, "--outside-transaction")
	}
	return args
}

// roundsRE reads the number of bursts from the in-flight line.
var roundsRE = regexp.MustCompile(`^(\d+) round\(s\)`)

// requireExamplePasses runs `drainer conformance` against an example's
// POST /v1/orders in mode and checks, through GET /v1/orders/count, that
// the handler took one effect per fresh key that reached it: the first
// write's and one per burst.
func requireExamplePasses(t *testing.T, base, mode string) {
	t.Helper()
	res, rep := runConformance(t, base+"/v1/orders", "--mode", mode, "--concurrency", "8",
		"--payload", `{"sku": "A-1", "qty": 2}`, "--header", "X-Account=acct-1")
	requireAllPass(t, res, rep, false)
	rounds := 0
	for _, c := range rep.Checks {
		if c.Name == "in-flight" {
			if m := roundsRE.FindStringSubmatch(c.Seen); m != nil {
				rounds, _ = strconv.Atoi(m[1])
			}
		}
	}
	if rounds == 0 {
		t.Fatalf("no burst count in the in-flight line:\n%s", res.stdout)
	}
	code, body := httpGet(base + "/v1/orders/count")
	var count struct {
		Count int `json:"count"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &count) != nil {
		t.Fatalf("GET /v1/orders/count: %d %s", code, body)
	}
	if count.Count != 1+rounds {
		t.Errorf("%d orders were created, want %d (one for the first write, one per burst of %d)", count.Count, 1+rounds, rounds)
	}
	t.Logf("%s mode: %d orders for %d keys\n%s", mode, count.Count, 1+rounds, res.stdout)
}

// TestConformancePythonExample: examples/receiver/python/server.py (the
// ASGI receiver of drainer_client under the example's stdlib server)
// passes every check in seed mode with the orders written outside the
// receiver's transaction, and in ietf mode with them written in it; one
// order per key.
func TestConformancePythonExample(t *testing.T) {
	t.Parallel()
	dir := pyRequireInterpreter(t)
	server, err := filepath.Abs("../examples/receiver/python/server.py")
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"seed", "ietf"} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			cmd := exec.CommandContext(ctx, pyInterpreter, append([]string{server}, exampleArgs(mode)...)...)
			cmd.Dir = dir
			cmd.Env = append(childEnv(), "DATABASE_URL="+dbtest.NewDatabase(t), "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
			requireExamplePasses(t, startExample(t, cmd), mode)
		})
	}
}

// TestConformanceGoExample: examples/receiver/go, built and started as a
// process, passes every check in seed mode with the orders written outside
// the receiver's transaction, and in ietf mode with them written in it; one
// order per key.
func TestConformanceGoExample(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "receiver-example")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/drainer-io/drainer/examples/receiver/go").CombinedOutput(); err != nil {
		t.Fatalf("go build examples/receiver/go: %v\n%s", err, out)
	}
	for _, mode := range []string{"seed", "ietf"} {
		t.Run(mode, func(t *testing.T) {
			cmd := exec.Command(bin, exampleArgs(mode)...)
			cmd.Env = append(childEnv(), "DATABASE_URL="+dbtest.NewDatabase(t))
			requireExamplePasses(t, startExample(t, cmd), mode)
		})
	}
}

// TestConformanceTypeScriptExample: examples/receiver/typescript/server.mjs
// (a Node http service behind @drainer/client/receiver, on the built
// library) passes every check in seed mode with the orders written outside
// the receiver's transaction, and in ietf mode with them written in it; one
// order per key.
func TestConformanceTypeScriptExample(t *testing.T) {
	t.Parallel()
	tsPrepareSDK(t)
	server, err := filepath.Abs("../examples/receiver/typescript/server.mjs")
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"seed", "ietf"} {
		t.Run(mode, func(t *testing.T) {
			cmd := exec.Command("node", append([]string{server}, exampleArgs(mode)...)...)
			cmd.Env = append(childEnv(), "DATABASE_URL="+dbtest.NewDatabase(t))
			requireExamplePasses(t, startExample(t, cmd), mode)
		})
	}
}
