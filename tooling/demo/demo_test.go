package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDemoSummary runs the demo end to end (its own throwaway Postgres) and
// checks what its summary promises: one lost answer settled by a replay the
// daemon counted, no duplicate effect, and the rows beyond the enqueued
// intents explained as the saga's compensation rows.
func TestDemoSummary(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	logDir := t.TempDir()
	if err := Run(ctx, Options{Out: &out, Err: &errb, Runs: 3, Workers: 4, LogDir: logDir}); err != nil {
		t.Fatalf("demo: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	got := out.String()
	checkLogFile(t, got, errb.String(), filepath.Join(logDir, "drainer-demo.log"))
	for _, want := range []string{
		"enqueued 12 intents",
		"14 rows: the 12 enqueued intents and 2 compensation rows, added by the saga of order-42",
		"release_stock undoing 2-reserve, refund_card undoing 1-charge",
		"lost answers: 1: run-000's charge was applied",
		`drainer_dispatch_total{outcome="replay"}: 1); effects for that key: 1`,
		"duplicate effects at the provider: 0",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("demo output:\n%s", got)
	}
}

// TestDemoGateway runs the gateway demo end to end (its own throwaway
// Postgres, the mock MCP tool server, drainer run with the gateway): the
// call the harness cut and its two re-sends under new request ids have one
// effect upstream, and both re-sends are answered as replays of it.
func TestDemoGateway(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	logDir := t.TempDir()
	if err := RunGateway(ctx, Options{Out: &out, Err: &errb, LogDir: logDir}); err != nil {
		t.Fatalf("gateway demo: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	got := out.String()
	for _, want := range []string{
		"send 1: cut by the harness while the tool was at work",
		"send 2: replay: \"charged 500 eur to card_4242 (ch_000001)\"",
		"send 3: replay: \"charged 500 eur to card_4242 (ch_000001)\"",
		"upstream requests: 1\n",
		"upstream effects: 1\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("gateway demo output lacks %q", want)
		}
	}
	checkLogFile(t, got, errb.String(), filepath.Join(logDir, "drainer-demo-gateway.log"))
	if t.Failed() {
		t.Logf("gateway demo output:\n%s", got)
	}
}

// checkLogFile: the demo's output (stdout and stderr) is progress and human
// text, no log line; its first line names the log file, which holds the
// daemon's logs, one JSON object a line.
func checkLogFile(t *testing.T, stdout, stderr, path string) {
	t.Helper()
	if first, _, _ := strings.Cut(stdout, "\n"); first != "logs: "+path {
		t.Errorf("first line %q, want %q", first, "logs: "+path)
	}
	for _, line := range strings.Split(stdout+"\n"+stderr, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "{") {
			t.Errorf("a log line in the demo's output: %s", line)
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the log file: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) < 2 {
		t.Errorf("the log file holds %d lines, want the daemon's logs", len(lines))
	}
	for _, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["msg"] == nil {
			t.Errorf("not a log line in %s: %s", path, line)
			break
		}
	}
}

// TestMakeDemoSaysItBuilds: `make demo` and `make demo-gateway` print a
// line before the build, which is silent and takes minutes the first time.
func TestMakeDemoSaysItBuilds(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make is what runs the demo (and these tests): %v", err)
	}
	for _, target := range []string{"demo", "demo-gateway"} {
		out, err := exec.Command("make", "-n", "-C", "../..", "--no-print-directory", target).CombinedOutput()
		if err != nil {
			t.Fatalf("make -n %s: %v\n%s", target, err, out)
		}
		note := strings.Index(string(out), "building drainer (the first build takes a few minutes)")
		build := strings.Index(string(out), " build ")
		if note < 0 || build < 0 || note > build {
			t.Errorf("make %s: no line before the build:\n%s", target, out)
		}
	}
}
