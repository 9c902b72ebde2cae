package builtin

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/drainer-io/drainer/config"
	"github.com/drainer-io/drainer/dispatch/natsjs/natsjstest"
	"github.com/nats-io/nats.go/jetstream"
)

// TestProviderWindowBoundsKeyTTL: an adapter whose provider reports its
// idempotency window (a nats stream's duplicate window) never keeps a
// longer key_ttl than that window, even one the config sets: a retry past
// the window would publish the message again, so the key-TTL guard must
// fail the row first. A window not longer than the guard's margin, which
// fails every key_idempotent row unsent, is said at start.
func TestProviderWindowBoundsKeyTTL(t *testing.T) {
	t.Parallel()
	url, js := natsjstest.JetStream(t)
	for name, window := range map[string]time.Duration{"LONG": 90 * time.Second, "SHORT": 30 * time.Second} {
		if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: name, Subjects: []string{strings.ToLower(name) + ".>"},
			Duplicates: window}); err != nil {
			t.Fatal(err)
		}
	}
	build := func(stream, keyTTL string) (time.Duration, string) {
		t.Helper()
		cfg, err := config.Parse("c.yaml", []byte(fmt.Sprintf(`adapters:
  bus: {type: nats, servers: [%q], subject: "%s.{tool_name}", stream: %s%s}
routes:
  emit: {adapter: bus}
`, url, strings.ToLower(stream), stream, keyTTL)), config.LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var logs bytes.Buffer
		reg, err := Build(context.Background(), cfg, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatalf("Build: %v", err)
		}
		defer reg.Close(context.Background())
		e, _ := reg.Get("bus")
		return e.KeyTTLFor(0), logs.String()
	}
	if ttl, logs := build("LONG", ", key_ttl: 24h"); ttl != 90*time.Second || !strings.Contains(logs, "key_ttl is longer than the idempotency window") {
		t.Errorf("key_ttl 24h on a stream whose duplicate window is 90s: key_ttl %v, want 1m30s and a warning; logs:\n%s", ttl, logs)
	}
	if ttl, logs := build("LONG", ", key_ttl: 80s"); ttl != 80*time.Second || strings.Contains(logs, "level=WARN") {
		t.Errorf("key_ttl 80s within the 90s window: key_ttl %v, want 1m20s and no warning; logs:\n%s", ttl, logs)
	}
	if ttl, logs := build("SHORT", ""); ttl != 30*time.Second || !strings.Contains(logs, "every key_idempotent row of this adapter fails before it is sent") {
		t.Errorf("a 30s duplicate window: key_ttl %v, want 30s and a warning that every row fails unsent; logs:\n%s", ttl, logs)
	}
}
