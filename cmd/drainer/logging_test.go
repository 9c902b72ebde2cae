package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/tooling/dbtest"
	"github.com/spf13/cobra"
)

// TestEveryCommandTakesLogFlags: --log-format and --log-level belong to the
// root, so every command (and DRAINER_LOG_FORMAT) chooses the same handler.
func TestEveryCommandTakesLogFlags(t *testing.T) {
	t.Parallel()
	var walk func(c *cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		for _, name := range []string{"log-format", "log-level"} {
			f := c.Flags().Lookup(name)
			if f == nil {
				f = c.InheritedFlags().Lookup(name)
			}
			if f == nil {
				f = c.PersistentFlags().Lookup(name)
			}
			if f == nil {
				t.Errorf("%s has no --%s", c.CommandPath(), name)
			} else if name == "log-format" && f.DefValue != "json" {
				t.Errorf("%s --log-format defaults to %q, want json", c.CommandPath(), f.DefValue)
			}
		}
		n++
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot(&bytes.Buffer{}, &bytes.Buffer{}))
	if n < 15 {
		t.Fatalf("walked %d commands only", n)
	}
	var out, errb bytes.Buffer
	if code := execute([]string{"version", "--log-format", "yaml"}, &out, &errb); code != exitUsage ||
		!strings.Contains(errb.String(), `--log-format: "yaml" is not json or text`) {
		t.Fatalf("--log-format yaml: exit %d, stderr %q", code, errb.String())
	}
}

// TestLogDurationsReadable: a duration is logged as "1m30s", not as a count
// of nanoseconds, in both formats and inside groups.
func TestLogDurationsReadable(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log, err := (&logFlags{format: "json", level: "info"}).logger(&buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("retry scheduled", "delay", 90*time.Second, slog.Group("lease", "ttl", 30*time.Second), "attempt", 3)
	var line struct {
		Delay   any            `json:"delay"`
		Lease   map[string]any `json:"lease"`
		Attempt any            `json:"attempt"`
	}
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("not JSON: %v: %s", err, buf.String())
	}
	if line.Delay != "1m30s" || line.Lease["ttl"] != "30s" || line.Attempt != 3.0 {
		t.Fatalf("log line = %s", buf.String())
	}
	buf.Reset()
	log, err = (&logFlags{format: "text", level: "info"}).logger(&buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("retry scheduled", "delay", 1500*time.Millisecond)
	if !strings.Contains(buf.String(), "delay=1.5s") {
		t.Fatalf("text log line = %s", buf.String())
	}
}

// TestMigrateLogsJSON: a command other than run logs JSON by default, and
// text with --log-format text or DRAINER_LOG_FORMAT=text.
func TestMigrateLogsJSON(t *testing.T) {
	url := dbtest.NewDatabase(t)
	migrate := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := execute(append([]string{"migrate", "--database-url", url}, args...), &out, &errb); code != exitOK {
			t.Fatalf("migrate %v: exit %d: %s", args, code, errb.String())
		}
		return errb.String()
	}
	stderr := migrate("--schema", "s_json")
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("migrate log line is not JSON: %q", l)
		}
	}
	if !strings.Contains(stderr, `"msg":"applying migration"`) {
		t.Fatalf("migrate logged no migration: %s", stderr)
	}
	if s := migrate("--schema", "s_text", "--log-format", "text"); !strings.Contains(s, `msg="applying migration"`) {
		t.Fatalf("--log-format text: %s", s)
	}
	t.Setenv("DRAINER_LOG_FORMAT", "text")
	if s := migrate("--schema", "s_env"); !strings.Contains(s, `msg="applying migration"`) || strings.Contains(s, `{"time"`) {
		t.Fatalf("DRAINER_LOG_FORMAT=text: %s", s)
	}
}
