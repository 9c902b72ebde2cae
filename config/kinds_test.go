package config

import (
	"strings"
	"testing"

	// The adapter types, registered as `drainer check` and `drainer run`
	// have them (package dispatch/builtin imports the same packages).
	_ "github.com/drainer-io/drainer/dispatch/execplugin"
	_ "github.com/drainer-io/drainer/dispatch/kafka"
	_ "github.com/drainer-io/drainer/dispatch/mcp"
	_ "github.com/drainer-io/drainer/dispatch/natsjs"
	_ "github.com/drainer-io/drainer/dispatch/pgtable"
	_ "github.com/drainer-io/drainer/dispatch/riverjob"
	_ "github.com/drainer-io/drainer/dispatch/stripe"
	_ "github.com/drainer-io/drainer/dispatch/webhook"
)

// settingsOf returns an adapter's settings as the type's struct T.
func settingsOf[T any](t testing.TB, a *Adapter) *T {
	t.Helper()
	s, ok := any(a.Settings).(*T)
	if !ok {
		t.Fatalf("adapter %s: settings are %T", a.Name, a.Settings)
	}
	return s
}

// TestNATSRouteNamesMustBeSubjectTokens: a route whose tool name cannot be
// the {tool_name} token of its nats adapter's subject is refused by check
// (its rows could never be published); with a subject without the
// variable any name goes.
func TestNATSRouteNamesMustBeSubjectTokens(t *testing.T) {
	_, err := parse(t, `
adapters:
  ev: {type: nats, servers: ["nats://127.0.0.1:4222"], subject: "agents.{tool_name}", key_ttl: 2m}
  fixed: {type: nats, servers: ["nats://127.0.0.1:4222"], subject: "agents.all", key_ttl: 2m}
routes:
  "a.b": {adapter: ev}
  "s p": {adapter: ev}
  ok_tool: {adapter: ev}
  "x.y": {adapter: fixed}
`, true)
	if err == nil {
		t.Fatal("Parse succeeded, want the two route names refused")
	}
	lines := errorLines(t, err)
	if len(lines) != 2 || !strings.Contains(lines[0], `routes.a.b: tool name "a.b" cannot be the {tool_name} token of adapters.ev.subject "agents.{tool_name}": contains '.'`) ||
		!strings.Contains(lines[1], `tool name "s p" cannot be the {tool_name} token`) {
		t.Errorf("errors:\n%s", strings.Join(lines, "\n"))
	}
}
