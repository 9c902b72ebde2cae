package execplugin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
	"github.com/drainer-io/drainer/outbox"
	"github.com/drainer-io/drainer/tooling/testkit"
)

const payloadSecret = "s3cr3t-payload-9d2e"

var testPayload = `{"amount":500,"note":"` + payloadSecret + `"}`

// testBundle is an adapter on plugin-echo and its upstream.
type testBundle struct {
	a    *Adapter
	up   *echoUpstream
	logs *testkit.Buffer
}

// setup starts plugin-echo through New with cfg's zero fields filled in.
func setup(t *testing.T, cfg Config) *testBundle {
	t.Helper()
	up := newEchoUpstream(t)
	logs := &testkit.Buffer{}
	if cfg.Command == "" {
		cfg.Command = echoBin
	}
	if cfg.Args == nil {
		cfg.Args = up.args()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(t.Output(), logs), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	a, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return &testBundle{a: a, up: up, logs: logs}
}

func dispatchMsg(t *testing.T, a dispatch.Adapter, m *dispatch.Message) dispatch.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	r := a.Dispatch(ctx, m)
	if r.Err != nil && strings.Contains(r.Err.Error(), payloadSecret) {
		t.Errorf("Err reveals the payload: %v", r.Err)
	}
	return r
}

func wantResult(t *testing.T, r dispatch.Result, outcome dispatch.Outcome, reason string) {
	t.Helper()
	if r.Outcome != outcome || (reason != "" && r.Reason != reason) {
		t.Fatalf("got %s (reason %q, NotSent %v, err %v), want %s (reason %q)", r.Outcome, r.Reason, r.NotSent, r.Err, outcome, reason)
	}
}

func TestDispatch(t *testing.T) {
	b := setup(t, Config{})
	m := dispatchtest.NewMessage("charge_card", testPayload)
	m.Kind, m.Attempt, m.Traceparent = outbox.KindCompensation, 3, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

	r := dispatchMsg(t, b.a, m)
	wantResult(t, r, dispatch.Success, "delivered")
	if r.Status != 200 || string(r.Response) != `{"delivered":true,"line":1}` || r.Err != nil || r.NotSent {
		t.Errorf("success: status %d, response %s, err %v, NotSent %v", r.Status, r.Response, r.Err, r.NotSent)
	}
	recs := b.up.records(t)
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1", len(recs))
	}
	got := recs[0]
	if got.Key != m.Key || got.ToolName != "charge_card" || got.Kind != string(outbox.KindCompensation) ||
		got.Seq != m.Seq || got.Attempt != 3 || string(got.Payload) != testPayload {
		t.Errorf("plugin received %+v, want the message's fields", got)
	}

	// The same key and payload: replay, answered with the first response.
	r = dispatchMsg(t, b.a, m)
	wantResult(t, r, dispatch.Replay, "replay")
	if string(r.Response) != `{"delivered":true,"line":1}` {
		t.Errorf("replay response %s", r.Response)
	}
	// The same key, another payload: terminal, nothing delivered.
	other := *m
	other.Payload = json.RawMessage(`{"amount":1}`)
	r = dispatchMsg(t, b.a, &other)
	wantResult(t, r, dispatch.Terminal, "payload_mismatch")
	if r.Status != 409 || r.Err == nil || !strings.Contains(r.Err.Error(), "another payload") {
		t.Errorf("mismatch: status %d, err %v", r.Status, r.Err)
	}
	if n := b.up.Effects(t, m.Key); n != 1 {
		t.Errorf("%d effects, want 1", n)
	}
	if strings.Contains(b.logs.String(), payloadSecret) {
		t.Error("the logs reveal the payload")
	}
}

// TestPayloadFaults covers plugin-echo's fault payloads other than crash.
func TestPayloadFaults(t *testing.T) {
	b := setup(t, Config{Timeout: 300 * time.Millisecond})
	for _, tc := range []struct {
		payload string
		outcome dispatch.Outcome
		reason  string
		status  int
	}{
		{`{"fail":"transient"}`, dispatch.Retry, "echo_transient", 503},
		{`{"fail":"terminal"}`, dispatch.Terminal, "echo_terminal", 422},
		{`{"fail":"hang"}`, dispatch.Ambiguous, dispatch.ReasonTimeout, 0},
	} {
		t.Run(tc.payload, func(t *testing.T) {
			m := dispatchtest.NewMessage("charge_card", tc.payload)
			start := time.Now()
			r := dispatchMsg(t, b.a, m)
			wantResult(t, r, tc.outcome, tc.reason)
			if r.Status != tc.status || r.Err == nil || r.NotSent {
				t.Errorf("status %d, err %v, NotSent %v", r.Status, r.Err, r.NotSent)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v with a 300ms timeout", d)
			}
			if n := b.up.Effects(t, m.Key); n != 0 {
				t.Errorf("%d effects, want 0", n)
			}
		})
	}
	// The hung call did not break the process.
	wantResult(t, dispatchMsg(t, b.a, dispatchtest.NewMessage("charge_card", testPayload)), dispatch.Success, "")
	if n := b.up.starts(t); n != 1 {
		t.Errorf("plugin started %d times, want 1", n)
	}
}

func TestCancelledDuringCall(t *testing.T) {
	b := setup(t, Config{})
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	r := b.a.Dispatch(ctx, dispatchtest.NewMessage("charge_card", `{"fail":"hang"}`))
	wantResult(t, r, dispatch.Ambiguous, dispatch.ReasonCancelled)
	if !errors.Is(r.Err, context.Canceled) {
		t.Errorf("err %v, want context.Canceled", r.Err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancellation took %v", d)
	}
}

// TestCrashRestarts: a plugin that exits during a call gives Ambiguous, and
// the next dispatch starts a new process, which delivers.
func TestCrashRestarts(t *testing.T) {
	b := setup(t, Config{})
	first := b.a.pid()
	r := dispatchMsg(t, b.a, dispatchtest.NewMessage("charge_card", `{"fail":"crash"}`))
	wantResult(t, r, dispatch.Ambiguous, ReasonPluginCrashed)
	if r.NotSent || r.Err == nil || !strings.Contains(r.Err.Error(), "exit status 3") {
		t.Errorf("NotSent %v, err %v: want the exit status", r.NotSent, r.Err)
	}
	if !processGone(first) {
		t.Errorf("crashed plugin %d still exists", first)
	}

	m := dispatchtest.NewMessage("charge_card", testPayload)
	wantResult(t, dispatchMsg(t, b.a, m), dispatch.Success, "delivered")
	if second := b.a.pid(); second == 0 || second == first {
		t.Errorf("pid after restart %d, before %d", second, first)
	}
	if n := b.up.starts(t); n != 2 {
		t.Errorf("plugin started %d times, want 2", n)
	}
	if n := b.up.Effects(t, m.Key); n != 1 {
		t.Errorf("%d effects, want 1", n)
	}
	if logs := b.logs.String(); !strings.Contains(logs, "plugin process lost") || !strings.Contains(logs, "plugin restarted") {
		t.Errorf("the crash and the restart are not logged:\n%s", logs)
	}
	// Keys delivered before the crash are replayed by the new process.
	wantResult(t, dispatchMsg(t, b.a, m), dispatch.Replay, "")
}

// TestKilledBetweenCalls: a process that died while idle is replaced before
// the call, which therefore cannot have reached a dead plugin.
func TestKilledBetweenCalls(t *testing.T) {
	b := setup(t, Config{})
	first := b.a.pid()
	b.a.mu.Lock()
	p := b.a.cur
	b.a.mu.Unlock()
	if err := p.runner.Kill(t.Context()); err != nil {
		t.Fatal(err)
	}
	<-p.Exited
	m := dispatchtest.NewMessage("charge_card", testPayload)
	wantResult(t, dispatchMsg(t, b.a, m), dispatch.Success, "")
	if b.a.pid() == first {
		t.Error("the killed process was not replaced")
	}
}

// TestRestartVerifiesChecksum: a binary replaced after the start is not run
// on restart; dispatches answer Retry with NotSent, backing off.
func TestRestartVerifiesChecksum(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "plugin-echo")
	copyFile(t, echoBin, bin)
	b := setup(t, Config{Command: bin, SHA256: fileSHA256(t, bin)})

	// Replace the binary (a different executable, same path), then crash.
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho tampered >&2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	wantResult(t, dispatchMsg(t, b.a, dispatchtest.NewMessage("charge_card", `{"fail":"crash"}`)), dispatch.Ambiguous, ReasonPluginCrashed)

	r := dispatchMsg(t, b.a, dispatchtest.NewMessage("charge_card", testPayload))
	wantResult(t, r, dispatch.Retry, ReasonPluginUnavailable)
	if !r.NotSent || !errors.Is(r.Err, ErrChecksumMismatch) || !strings.Contains(r.Err.Error(), bin) {
		t.Errorf("NotSent %v, err %v: want a checksum mismatch naming %s", r.NotSent, r.Err, bin)
	}
	// The next call is within the backoff: no start, a RetryAfter.
	r = dispatchMsg(t, b.a, dispatchtest.NewMessage("charge_card", testPayload))
	wantResult(t, r, dispatch.Retry, ReasonPluginUnavailable)
	if !r.NotSent || r.RetryAfter <= 0 || r.RetryAfter > restartBackoffBase {
		t.Errorf("NotSent %v, RetryAfter %v: want a floor of at most %v", r.NotSent, r.RetryAfter, restartBackoffBase)
	}
	if n := b.up.starts(t); n != 1 {
		t.Errorf("plugin started %d times, want 1: the tampered binary ran", n)
	}
	if logs := b.logs.String(); strings.Contains(logs, "tampered") || !strings.Contains(logs, "plugin could not be started") {
		t.Errorf("want the failed start logged, and no output of the tampered binary:\n%s", logs)
	}
}

func TestNewChecksum(t *testing.T) {
	t.Run("match", func(t *testing.T) {
		b := setup(t, Config{SHA256: fileSHA256(t, echoBin)})
		if n := b.up.starts(t); n != 1 {
			t.Errorf("plugin started %d times, want 1", n)
		}
	})
	t.Run("mismatch", func(t *testing.T) {
		up := newEchoUpstream(t)
		wrong := strings.Repeat("ab", 32)
		_, err := New(t.Context(), Config{Command: echoBin, Args: up.args(), SHA256: wrong})
		if !errors.Is(err, ErrChecksumMismatch) {
			t.Fatalf("err %v, want ErrChecksumMismatch", err)
		}
		for _, want := range []string{echoBin, wrong, fileSHA256(t, echoBin), "refusing to run it"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %s", err, want)
			}
		}
		if n := up.starts(t); n != 0 {
			t.Errorf("the plugin ran %d times despite the mismatch", n)
		}
	})
}

func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-exec")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing-plugin")
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"missing binary", Config{Command: missing}, []string{missing, "does not exist"}},
		{"relative path", Config{Command: "plugin-echo"}, []string{"absolute path", `"plugin-echo"`}},
		{"empty", Config{}, []string{"command: required field is missing"}},
		{"directory", Config{Command: dir}, []string{dir, "not a regular file"}},
		{"not executable", Config{Command: notExec}, []string{notExec, "not executable"}},
		{"bad sha256", Config{Command: echoBin, SHA256: "ABC"}, []string{"sha256", "64 lower-case hex"}},
		{"negative timeout", Config{Command: echoBin, Timeout: -time.Second}, []string{"timeout"}},
		{"not a plugin", Config{Command: "/bin/true"}, []string{"/bin/true", "did not complete drainer's plugin handshake", "sdk.Serve"}},
		{"args never quoted", Config{Command: "/bin/true", Args: []string{conformanceSecret}}, []string{"/bin/true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			a, err := New(t.Context(), tc.cfg)
			if err == nil {
				a.Close()
				t.Fatal("New succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), conformanceSecret) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q quotes an argument or spans lines", err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("New took %v to fail", d)
			}
		})
	}
}

// TestNotAPluginScripts: executables that print no handshake, or a go-plugin
// handshake of another protocol, or hostile log lines, fail New cleanly.
func TestNotAPluginScripts(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, script string
		want         string
	}{
		{"garbage on stdout", "echo hello; exit 0", "did not complete drainer's plugin handshake"},
		{"net/rpc protocol", "echo '1|1|unix|/nonexistent|netrpc|'; sleep 5", "unsupported plugin protocol"},
		// go-plugin asserts these fields to be strings: without
		// stderrFilter, this line would panic the test binary.
		{"hostile log line", `echo '{"@message":1,"@level":{},"@timestamp":null}' >&2; exit 1`, "did not complete"},
		{"silent", "sleep 30", "timeout while waiting for plugin to start"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := filepath.Join(dir, strings.NewReplacer(" ", "-", "/", "-").Replace(tc.name))
			if err := os.WriteFile(bin, []byte("#!/bin/sh\n"+tc.script+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			_, err := New(t.Context(), Config{Command: bin, StartTimeout: 2 * time.Second, Logger: testLogger(t)})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), bin) {
				t.Fatalf("err %v, want one naming %s and containing %q", err, bin, tc.want)
			}
			if pids := childProcesses(t, filepath.Base(bin)); len(pids) > 0 {
				t.Errorf("processes %v left running", pids)
			}
		})
	}
}

// TestPluginEnv: a plugin gets DRAINER_PLUGIN_* and a few harmless
// variables, not the rest of drainer's environment.
func TestPluginEnv(t *testing.T) {
	t.Setenv("DRAINER_DATABASE_URL", "postgres://user:s3cr3t@db/drainer")
	t.Setenv("DRAINER_PLUGIN_ECHO_OUT", "/somewhere")
	t.Setenv(envPrefix+"MAGIC_COOKIE", "forged") // cannot override the handshake
	dir := t.TempDir()
	dump := filepath.Join(dir, "env")
	bin := filepath.Join(dir, "env-plugin")
	script := "#!/bin/sh\nenv > " + dump + "\nexit 1\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := New(t.Context(), Config{Command: bin}); err == nil {
		t.Fatal("New succeeded")
	}
	b, err := os.ReadFile(dump)
	if err != nil {
		t.Fatal(err)
	}
	env := string(b)
	for _, want := range []string{"DRAINER_PLUGIN_ECHO_OUT=/somewhere\n", "PATH=", "DRAINER_PLUGIN_MAGIC_COOKIE=8d1f4b0e"} {
		if !strings.Contains(env, want) {
			t.Errorf("plugin environment lacks %q", want)
		}
	}
	for _, bad := range []string{"DRAINER_DATABASE_URL", "s3cr3t", "=forged"} {
		if strings.Contains(env, bad) {
			t.Errorf("plugin environment holds %q", bad)
		}
	}
}

func TestClose(t *testing.T) {
	b := setup(t, Config{})
	wantResult(t, dispatchMsg(t, b.a, dispatchtest.NewMessage("charge_card", testPayload)), dispatch.Success, "")
	pid := b.a.pid()
	if pids := childProcesses(t, "plugin-echo"); len(pids) != 1 || pids[0] != pid {
		t.Fatalf("plugin processes %v, want [%d]", pids, pid)
	}
	if err := b.a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.a.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	if pids := childProcesses(t, "plugin-echo"); len(pids) != 0 {
		t.Errorf("plugin processes %v left after Close", pids)
	}
	if !processGone(pid) {
		t.Errorf("process %d still exists", pid)
	}
	r := dispatchMsg(t, b.a, dispatchtest.NewMessage("charge_card", testPayload))
	wantResult(t, r, dispatch.Retry, ReasonPluginUnavailable)
	if !r.NotSent {
		t.Error("dispatch after Close: NotSent false")
	}
	if _, err := os.Stat(b.a.tmpDir); !os.IsNotExist(err) {
		t.Errorf("socket directory %s left: %v", b.a.tmpDir, err)
	}
}

// TestCloseDuringCall: Close ends calls in flight; none is reported as a
// success it was not.
func TestCloseDuringCall(t *testing.T) {
	b := setup(t, Config{})
	done := make(chan dispatch.Result)
	go func() { done <- b.a.Dispatch(t.Context(), dispatchtest.NewMessage("charge_card", `{"fail":"hang"}`)) }()
	time.Sleep(100 * time.Millisecond) // let the call reach the plugin; either order is valid
	b.a.Close()
	r := <-done
	if r.Outcome != dispatch.Ambiguous && !(r.Outcome == dispatch.Retry && r.NotSent) {
		t.Errorf("call in flight at Close: %s (reason %q, err %v)", r.Outcome, r.Reason, r.Err)
	}
	if pids := childProcesses(t, "plugin-echo"); len(pids) != 0 {
		t.Errorf("plugin processes %v left after Close", pids)
	}
}

func TestConcurrentWithCrash(t *testing.T) {
	b := setup(t, Config{})
	const n = 40
	var wg sync.WaitGroup
	results := make([]dispatch.Result, n)
	msgs := make([]*dispatch.Message, n)
	for i := range msgs {
		payload := testPayload
		if i == n/2 {
			payload = `{"fail":"crash"}`
		}
		msgs[i] = dispatchtest.NewMessage("charge_card", payload)
	}
	for i := range msgs {
		wg.Go(func() { results[i] = dispatchMsg(t, b.a, msgs[i]) })
	}
	wg.Wait()
	for i, r := range results {
		effects := b.up.Effects(t, msgs[i].Key)
		switch {
		case r.Succeeded() && effects != 1:
			t.Errorf("dispatch %d: %s with %d effects", i, r.Outcome, effects)
		case r.Outcome == dispatch.Retry && r.NotSent && effects != 0:
			t.Errorf("dispatch %d: NotSent with %d effects", i, effects)
		case !r.Succeeded() && r.Outcome != dispatch.Ambiguous && !(r.Outcome == dispatch.Retry && r.NotSent):
			t.Errorf("dispatch %d: %s (reason %q, err %v)", i, r.Outcome, r.Reason, r.Err)
		}
	}
	// Whatever happened, the adapter recovers.
	wantResult(t, dispatchMsg(t, b.a, dispatchtest.NewMessage("charge_card", testPayload)), dispatch.Success, "")
}

func TestKeyTTL(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
		err  error
	}{
		{nil, 0, ErrKeyTTLNotReported},
		{[]string{"--key-ttl", "24h"}, 24 * time.Hour, nil},
		{[]string{"--key-ttl", "0s"}, 0, nil}, // unlimited
	} {
		t.Run(fmt.Sprint(tc.args), func(t *testing.T) {
			up := newEchoUpstream(t)
			b := setup(t, Config{Args: up.args(tc.args...)})
			got, err := b.a.KeyTTL(t.Context())
			if got != tc.want || !errors.Is(err, tc.err) {
				t.Errorf("KeyTTL() = %v, %v; want %v, %v", got, err, tc.want, tc.err)
			}
		})
	}
}

// TestPluginLogLevels: the plugin's sdk.Logger lines keep their level.
func TestPluginLogLevels(t *testing.T) {
	b := setup(t, Config{})
	wantResult(t, dispatchMsg(t, b.a, dispatchtest.NewMessage("charge_card", testPayload)), dispatch.Success, "")
	logs := b.logs.String()
	if !strings.Contains(logs, `level=INFO msg="plugin-echo ready"`) {
		t.Errorf("the plugin's info line is not logged at info:\n%s", logs)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// childProcesses returns the pids of this process's children named comm,
// zombies included, from /proc.
func childProcesses(t *testing.T, comm string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	comm = comm[:min(len(comm), 15)] // the kernel truncates comm
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		s := string(stat)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		fields := strings.Fields(s[end+1:])
		if len(fields) < 2 || s[open+1:end] != comm {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); ppid == os.Getpid() {
			pids = append(pids, pid)
		}
	}
	return pids
}

// processGone reports whether pid no longer exists (not even as a zombie).
func processGone(pid int) bool {
	_, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid)))
	return os.IsNotExist(err)
}
