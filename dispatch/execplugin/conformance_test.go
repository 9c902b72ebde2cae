package execplugin

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
)

// echoUpstream is plugin-echo seen from the test: its output file holds the
// effects, its faults file the injected faults.
type echoUpstream struct {
	out, faults, started string
}

var _ dispatchtest.Upstream = (*echoUpstream)(nil)

func newEchoUpstream(t *testing.T) *echoUpstream {
	t.Helper()
	dir := t.TempDir()
	return &echoUpstream{
		out:     filepath.Join(dir, "out.jsonl"),
		faults:  filepath.Join(dir, "faults"),
		started: filepath.Join(dir, "started"),
	}
}

// args configures plugin-echo for this upstream.
func (u *echoUpstream) args(extra ...string) []string {
	return append([]string{"--out", u.out, "--faults", u.faults, "--started", u.started}, extra...)
}

// records returns the lines of the output file.
func (u *echoUpstream) records(t *testing.T) []record {
	t.Helper()
	f, err := os.Open(u.out)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs []record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v", u.out, err)
		}
		recs = append(recs, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return recs
}

// record is a line of plugin-echo's output file.
type record struct {
	Key      string          `json:"key"`
	ToolName string          `json:"tool_name"`
	Kind     string          `json:"kind"`
	Seq      int64           `json:"seq"`
	Attempt  int             `json:"attempt"`
	Tag      string          `json:"tag"`
	Payload  json.RawMessage `json:"payload"`
}

func (u *echoUpstream) Effects(t *testing.T, key string) int {
	n := 0
	for _, r := range u.records(t) {
		if r.Key == key {
			n++
		}
	}
	return n
}

// Inject queues faults in the file plugin-echo consumes one line of per
// dispatch. Call it between dispatches.
func (u *echoUpstream) Inject(f dispatchtest.Fault, n int) bool {
	var name string
	switch f {
	case dispatchtest.FaultTransient, dispatchtest.FaultTerminal, dispatchtest.FaultHang:
		name = f.String()
	default:
		return false
	}
	return u.injectRaw(name, n) == nil
}

func (u *echoUpstream) injectRaw(name string, n int) error {
	old, err := os.ReadFile(u.faults)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	b := append(old, strings.Repeat(name+"\n", n)...)
	tmp := u.faults + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, u.faults) // plugin-echo rewrites the file by rename too
}

// starts returns how many times plugin-echo started with this upstream.
func (u *echoUpstream) starts(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(u.started)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// conformanceSecret is passed to the plugin as an argument: arguments may
// hold credentials and must never appear in an error.
const conformanceSecret = "s3cr3t-plugin-arg-77c1"

func TestConformance(t *testing.T) {
	dispatchtest.Run(t, func(t *testing.T) (dispatch.Adapter, dispatchtest.Upstream, string) {
		up := newEchoUpstream(t)
		a, err := New(t.Context(), Config{
			Command: echoBin,
			Args:    up.args("--tag", conformanceSecret),
			Timeout: 10 * time.Second,
			Logger:  testLogger(t),
		})
		if err != nil {
			t.Fatal(err)
		}
		return a, up, conformanceSecret
	})
}

// testLogger logs to t at debug level.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}
