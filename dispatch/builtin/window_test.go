package builtin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/dispatchtest"
	"github.com/drainer-io/drainer/dispatch/natsjs/natsjstest"
	"github.com/drainer-io/drainer/tooling/testkit"
)

// streams starts a nats server for t and creates on it the streams names,
// each capturing its lower-cased name's subjects, with the duplicate
// window window.
func streams(t *testing.T, window time.Duration, names ...string) (string, jetstream.JetStream) {
	t.Helper()
	url, js := natsjstest.JetStream(t)
	for _, name := range names {
		if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: name, Subjects: []string{strings.ToLower(name) + ".>"},
			Duplicates: window}); err != nil {
			t.Fatal(err)
		}
	}
	return url, js
}

// setDuplicates changes the duplicate window of stream while the daemon
// runs, as an operator would.
func setDuplicates(t *testing.T, js jetstream.JetStream, stream string, window time.Duration) {
	t.Helper()
	s, err := js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.Duplicates = window
	if _, err := js.UpdateStream(t.Context(), cfg); err != nil {
		t.Fatalf("set the duplicate window of %s to %s: %v", stream, window, err)
	}
}

// TestProviderWindowRefreshed: a stream's duplicate window changed while
// the daemon runs reaches the key-TTL guard within one refresh interval.
// Shortened from 10m to 2m, every route of the adapter is bounded by 2m
// (a retry past it would publish again), with one warning naming the
// adapter and both windows; lengthened again, an adapter without key_ttl
// follows it, and one with key_ttl 5m gets its own key_ttl back. A window
// brought within the guard's margin is warned about as at start. Once
// the registry is closed, no goroutine is left.
func TestProviderWindowRefreshed(t *testing.T) {
	dispatchtest.NoGoroutineLeft(t)
	url, js := streams(t, 10*time.Minute, "FOLLOW", "CAPPED")
	reg, logs := buildRefreshing(t, fmt.Sprintf(`adapters:
  follow: {type: nats, servers: [%[1]q], subject: "follow.{tool_name}", stream: FOLLOW}
  capped: {type: nats, servers: [%[1]q], subject: "capped.{tool_name}", stream: CAPPED, key_ttl: 5m}
routes:
  a: {adapter: follow}
  b: {adapter: capped}
`, url))
	defer reg.Close(context.Background())
	follow, _ := reg.Get("follow")
	capped, _ := reg.Get("capped")
	if f, c := follow.KeyTTLFor(0), capped.KeyTTLFor(0); f != 10*time.Minute || c != 5*time.Minute {
		t.Fatalf("at start: key_ttl %s and %s, want 10m (the window) and 5m (the config's)", f, c)
	}

	// Generous: the refresh runs every 50ms; a slow machine only makes the
	// wait longer, never the verdict different.
	const within = 30 * time.Second
	expect := func(what string, want map[string]time.Duration) {
		t.Helper()
		testkit.WaitFor(t, within, what, func() (bool, string) {
			f, c, r := follow.KeyTTLFor(0), capped.KeyTTLFor(0), follow.KeyTTLFor(3*time.Hour)
			return f == want["follow"] && c == want["capped"] && r == want["follow"],
				fmt.Sprintf("follow %s (a route's 3h: %s), capped %s", f, r, c)
		})
	}

	setDuplicates(t, js, "FOLLOW", 2*time.Minute)
	setDuplicates(t, js, "CAPPED", 2*time.Minute)
	expect("the shortened windows applied", map[string]time.Duration{"follow": 2 * time.Minute, "capped": 2 * time.Minute})
	for _, name := range []string{"follow", "capped"} {
		line := fmt.Sprintf("adapter=%s old_window=10m0s new_window=2m0s", name)
		testkit.WaitFor(t, within, "the shortening logged for "+name, func() (bool, string) {
			return strings.Contains(logs.String(), line), ""
		})
	}

	setDuplicates(t, js, "FOLLOW", 20*time.Minute)
	setDuplicates(t, js, "CAPPED", 20*time.Minute)
	expect("the lengthened windows applied", map[string]time.Duration{"follow": 20 * time.Minute, "capped": 5 * time.Minute})

	setDuplicates(t, js, "FOLLOW", config.KeyTTLMargin)
	expect("a window within the margin applied", map[string]time.Duration{"follow": config.KeyTTLMargin, "capped": 5 * time.Minute})
	testkit.WaitFor(t, within, "the margin warning", func() (bool, string) {
		return strings.Contains(logs.String(), `every key_idempotent row of this adapter fails before it is sent; lengthen the provider's window (for nats: the stream's duplicate window, Duplicates) beyond it" adapter=follow key_ttl=1m0s`), ""
	})

	// By now each adapter has read its unchanged 2m or 20m window many
	// times: the shortening is still said once.
	for _, name := range []string{"follow", "capped"} {
		shortened := linesWith(logs.String(), fmt.Sprintf("adapter=%s old_window=10m0s new_window=2m0s", name))
		if len(shortened) != 1 || !strings.Contains(shortened[0], "level=WARN") || !strings.Contains(shortened[0], "window was shortened") {
			t.Errorf("the shortening of %s logged as %q, want one warning; logs:\n%s", name, shortened, logs.String())
		}
	}
	if err := reg.Close(context.Background()); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// TestWindowUnreadAtStartRead: an adapter with a key_ttl of its own whose
// provider's window could not be read at start (its stream did not exist
// yet; an unreachable server is the same) gets that window applied once it
// can be read, within the refresh interval, and said once; failures
// before that are not warned about.
func TestWindowUnreadAtStartRead(t *testing.T) {
	dispatchtest.NoGoroutineLeft(t)
	url, js := streams(t, 10*time.Minute)
	reg, logs := buildRefreshing(t, fmt.Sprintf(`adapters:
  late: {type: nats, servers: [%q], subject: "late.{tool_name}", key_ttl: 1h}
routes:
  a: {adapter: late}
`, url))
	defer reg.Close(context.Background())
	late, _ := reg.Get("late")
	if got := late.KeyTTLFor(0); got != time.Hour {
		t.Fatalf("at start: key_ttl %s, want the config's 1h", got)
	}
	time.Sleep(200 * time.Millisecond) // a few failed readings
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "LATE", Subjects: []string{"late.>"}, Duplicates: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "the window read once the stream exists", func() (bool, string) {
		got := late.KeyTTLFor(0)
		return got == 2*time.Minute, "key_ttl " + got.String()
	})
	testkit.WaitFor(t, 30*time.Second, "the reading logged", func() (bool, string) {
		return len(linesWith(logs.String(), "unread at start, was read")) == 1, logs.String()
	})
	out := logs.String()
	if read := linesWith(out, "unread at start, was read"); !strings.Contains(read[0], "level=WARN") || !strings.Contains(read[0], "window=2m0s") {
		t.Errorf("the reading logged as %q, want a warning naming the 2m window", read)
	}
	if n := len(linesWith(out, "cannot be read")); n != 0 {
		t.Errorf("%d warnings while the window was still unread, want none; logs:\n%s", n, out)
	}
	if err := reg.Close(context.Background()); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// buildRefreshing builds the adapters of the config yaml, their windows
// read again every 50 ms, logging into the buffer it returns.
func buildRefreshing(t *testing.T, yaml string) (*dispatch.Registry, *testkit.Buffer) {
	t.Helper()
	cfg, err := config.Parse("c.yaml", []byte(yaml), config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	logs := &testkit.Buffer{}
	reg, err := Build(context.Background(), cfg, Options{Logger: slog.New(slog.NewTextHandler(logs, nil)), WindowRefresh: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return reg, logs
}

// linesWith returns the lines of logs that contain s.
func linesWith(logs, s string) []string {
	var found []string
	for line := range strings.Lines(logs) {
		if strings.Contains(line, s) {
			found = append(found, line)
		}
	}
	return found
}

// readings is a dispatch.KeyTTLer that answers with its windows (an error
// for 0) in turn, its last one from then on.
type readings []time.Duration

func (r *readings) KeyTTL(context.Context) (time.Duration, error) {
	w := (*r)[0]
	if len(*r) > 1 {
		*r = (*r)[1:]
	}
	if w == 0 {
		return 0, errors.New("stream not found")
	}
	return w, nil
}

// TestWindowReadFailureKeepsLast: a window that cannot be read keeps the
// last one read in force (no row fails because the provider could not be
// asked), with one warning per failure streak; the next good reading
// applies.
func TestWindowReadFailureKeepsLast(t *testing.T) {
	t.Parallel()
	var logs testkit.Buffer
	r := readings{2 * time.Minute, 0, 0, 0, 3 * time.Minute, 0, 0}
	e := &dispatch.Entry{Name: "bus", KeyTTL: 10 * time.Minute, KeyTTLFromProvider: true, ProviderWindow: 10 * time.Minute}
	w := &windowWatch{entry: e, read: &r, log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	want := []time.Duration{2 * time.Minute, 2 * time.Minute, 2 * time.Minute, 2 * time.Minute, 3 * time.Minute, 3 * time.Minute, 3 * time.Minute}
	for i, ttl := range want {
		w.refresh(t.Context())
		if got := e.KeyTTLFor(0); got != ttl {
			t.Fatalf("after reading %d: key_ttl %s, want %s", i+1, got, ttl)
		}
	}
	out := logs.String()
	if n := len(linesWith(out, "level=WARN msg=\"the provider's idempotency window cannot be read")); n != 2 {
		t.Errorf("%d warnings for two failure streaks, want 2; logs:\n%s", n, out)
	}
	if n := len(linesWith(out, "still cannot be read")); n != 3 {
		t.Errorf("%d debug lines for the failures after the first of a streak, want 3; logs:\n%s", n, out)
	}
}
