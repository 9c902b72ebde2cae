package config

import (
	"reflect"
	"slices"
	"testing"
)

// TestAdapterKindsTable keeps the per-type field table in step with the
// Adapter struct: every listed field exists, and every field that is not
// listed is one of the common fields. A type-specific field added to the
// struct but not to the table fails here.
func TestAdapterKindsTable(t *testing.T) {
	fields := fieldsOf(reflect.TypeFor[Adapter]())
	listed := map[string]bool{}
	for _, k := range adapterKinds {
		for _, f := range k.fields {
			if _, ok := fields[f]; !ok {
				t.Errorf("adapter type %s lists field %s, which Adapter does not have", k.name, f)
			}
			listed[f] = true
		}
	}
	var common []string
	for name := range fields {
		if !listed[name] {
			common = append(common, name)
		}
	}
	slices.Sort(common)
	want := []string{"breaker", "key_ttl", "max_concurrency", "rate_limit", "timeout", "type"}
	if !slices.Equal(common, want) {
		t.Errorf("common adapter fields = %v, want %v (list type-specific fields in adapterKinds)", common, want)
	}
	if got := AdapterTypes(); !slices.Equal(got, []string{"http", "stripe", "postgres", "river", "nats", "plugin", "mcp", "kafka"}) {
		t.Errorf("AdapterTypes = %v", got)
	}
}

func TestAdapterFieldRule(t *testing.T) {
	for _, tt := range []struct{ typ, field, want string }{
		{"http", "url", ""},
		{"http", "timeout", ""},
		{"river", "dsn", ""},
		{"nats", "url", "field url is not valid for adapter type nats (only for http, mcp)"},
		{"http", "dsn", "field dsn is not valid for adapter type http (only for postgres, river)"},
	} {
		if got := adapterFieldRule(tt.typ, tt.field); got != tt.want {
			t.Errorf("adapterFieldRule(%s, %s) = %q, want %q", tt.typ, tt.field, got, tt.want)
		}
	}
}
