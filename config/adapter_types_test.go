package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/drainer-io/drainer/dispatch"
)

// TestAdapterEnvelope: config holds only the envelope of an adapter; every
// other key belongs to a registered type's settings, and no type's settings
// reuse an envelope key.
func TestAdapterEnvelope(t *testing.T) {
	envelope := slices.Sorted(func(yield func(string) bool) {
		for name := range fieldsOf(reflect.TypeFor[Adapter]()) {
			if !yield(name) {
				return
			}
		}
	})
	want := []string{"breaker", "key_ttl", "max_concurrency", "rate_limit", "timeout", "type"}
	if !slices.Equal(envelope, want) {
		t.Errorf("adapter envelope = %v, want %v (a type's own keys belong in its settings)", envelope, want)
	}
	if got := AdapterTypes(); !slices.Equal(got, []string{"http", "kafka", "mcp", "nats", "plugin", "postgres", "river", "stripe"}) {
		t.Errorf("AdapterTypes = %v", got)
	}
	for _, typ := range AdapterTypes() {
		k, _ := dispatch.KindOf(typ)
		_, fields := settingsFields(k)
		for name := range fields {
			if slices.Contains(want, name) {
				t.Errorf("adapter type %s's settings reuse the envelope key %s", typ, name)
			}
		}
	}
}

func TestAdapterFieldRule(t *testing.T) {
	for _, tt := range []struct{ typ, field, want string }{
		{"http", "url: http://h/x", ""},
		{"http", "timeout: 5s", "adapters.a.url: required field is missing"},
		{"nats", "url: http://h/x", "adapters.a.url: field url is not valid for adapter type nats (only for http, mcp)"},
		{"http", "dsn: x", "adapters.a.dsn: field dsn is not valid for adapter type http (only for postgres, river)"},
		{"http", "colour: x", "adapters.a.colour: unknown field; valid fields: breaker, headers, idempotency_key, key_ttl"},
	} {
		_, err := Parse("c.yaml", []byte("adapters:\n  a:\n    type: "+tt.typ+"\n    "+tt.field+"\nroutes:\n  t: {adapter: a}\n"), LoadOptions{Check: true})
		got := ""
		if err != nil {
			got = err.Error()
		}
		if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
			t.Errorf("%s with %s: %q, want %q", tt.typ, tt.field, got, tt.want)
		}
	}
}
