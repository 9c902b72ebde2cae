//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// recvService is one running example service of examples/receiver.
type recvService struct {
	name string
	url  string
}

// recvStart starts an example service with DATABASE_URL and --addr
// 127.0.0.1:0 and waits for its "listening on URL" line.
func recvStart(t *testing.T, name, dbURL string, cmd *exec.Cmd) recvService {
	t.Helper()
	cmd.Env = childEnv("DATABASE_URL=" + dbURL)
	var stderr testkit.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				lines <- u
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case u := <-lines:
		return recvService{name: name, url: u}
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s did not report its address within 2 minutes; stderr:\n%s", name, stderr.String())
	}
	return recvService{}
}

// TestReceiverSharedStore runs the Go, Python and TypeScript example
// services of examples/receiver on one database and schema: a request first
// answered by one of them is replayed byte for byte by the other two, and a
// changed request is refused by all, so a polyglot team shares one store.
func TestReceiverSharedStore(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.NewDatabase(t)
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	pyRequireInterpreter(t)
	tsPrepareSDK(t)

	goBin := filepath.Join(t.TempDir(), "receiver-example")
	build := exec.Command("go", "build", "-o", goBin, "./examples/receiver/go")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/receiver/go: %v\n%s", err, out)
	}
	addr := []string{"--addr", "127.0.0.1:0"}
	// One at a time: each migrates the same schema (safe concurrently too).
	services := []recvService{
		recvStart(t, "go", dbURL, exec.Command(goBin, "-addr", "127.0.0.1:0")),
		recvStart(t, "python", dbURL, exec.Command(pyInterpreter, append([]string{filepath.Join(root, "examples/receiver/python/server.py")}, addr...)...)),
		recvStart(t, "typescript", dbURL, exec.Command("node", append([]string{filepath.Join(root, "examples/receiver/typescript/server.mjs")}, addr...)...)),
	}

	client := &http.Client{Timeout: 30 * time.Second}
	post := func(s recvService, key, body string) (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, s.url+"/v1/orders", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	for i, first := range services {
		key := fmt.Sprintf("shared-%d-%d", i, time.Now().UnixNano())
		body := fmt.Sprintf(`{"sku":"S%d","qty":2}`, i)
		code, h, answer := post(first, key, body)
		if code != http.StatusCreated || h.Get("Idempotency-Replay") != "false" {
			t.Fatalf("%s, first request: %d %v %q", first.name, code, h, answer)
		}
		for _, other := range services {
			// The same request spelled differently (key order, spacing,
			// 2.0 for 2): still the same request.
			c, h, b := post(other, key, fmt.Sprintf(`{ "qty": 2.0, "sku": "S%d" }`, i))
			if c != http.StatusOK || h.Get("Idempotency-Replay") != "true" || h.Get("Idempotent-Replayed") != "true" ||
				!bytes.Equal([]byte(b), []byte(answer)) || h.Get("Location") == "" {
				t.Errorf("%s replaying %s's answer: %d %v %q, want 200 with %q", other.name, first.name, c, h, b, answer)
			}
			c, h, _ = post(other, key, `{"sku":"other","qty":2}`)
			if c != http.StatusConflict || h.Get("Idempotency-Conflict") != "payload-mismatch" {
				t.Errorf("%s, changed request under %s's key: %d %v, want 409 payload-mismatch", other.name, first.name, c, h)
			}
		}
	}
	resp, err := client.Get(services[0].url + "/v1/orders/count")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if strings.TrimSpace(string(b)) != `{"count":3}` {
		t.Fatalf("orders made: %s, want 3 (one per key)", b)
	}
}
