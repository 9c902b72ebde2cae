package config

import (
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
