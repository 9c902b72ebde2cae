package config

import (
	"fmt"
	"slices"
	"strings"
)

// adapterKind is one adapter type: the fields only it accepts (besides the
// common ones: type, timeout, breaker, rate_limit, max_concurrency,
// key_ttl) and the checks of those fields. To add a type or a field, add
// the struct field to Adapter and list it here; Secret fields get the
// secret rules automatically.
type adapterKind struct {
	name     string
	fields   []string
	validate func(v *validator, path string, a *Adapter)
}

var adapterKinds = []adapterKind{
	{TypeHTTP, []string{"url", "headers", "idempotency_key"}, (*validator).httpAdapter},
	{TypeStripe, []string{"api_key", "stripe_version", "base_url", "tools"}, (*validator).stripeAdapter},
	{TypePostgres, []string{"dsn", "table"}, (*validator).postgresAdapter},
	{TypeRiver, []string{"dsn", "queue", "job_kind", "schema"}, (*validator).riverAdapter},
	{TypeNATS, []string{"servers", "subject", "stream"}, (*validator).natsAdapter},
	{TypePlugin, []string{"command", "args", "sha256"}, (*validator).pluginAdapter},
	{TypeMCP, []string{"url", "headers"}, (*validator).mcpAdapter},
	{TypeKafka, []string{"brokers", "topic", "tls", "sasl"}, (*validator).kafkaAdapter},
}

// AdapterTypes returns the valid adapter types, in documentation order.
func AdapterTypes() []string {
	names := make([]string, len(adapterKinds))
	for i, k := range adapterKinds {
		names[i] = k.name
	}
	return names
}

func knownAdapterType(t string) bool { return slices.Contains(AdapterTypes(), t) }

func adapterKindOf(t string) (adapterKind, bool) {
	for _, k := range adapterKinds {
		if k.name == t {
			return k, true
		}
	}
	return adapterKind{}, false
}

// adapterFieldRule returns why an adapter of type typ may not have the
// field name, or "" if it may.
func adapterFieldRule(typ, name string) string {
	var owners []string
	for _, k := range adapterKinds {
		if slices.Contains(k.fields, name) {
			if k.name == typ {
				return ""
			}
			owners = append(owners, k.name)
		}
	}
	if len(owners) == 0 {
		return "" // a common field
	}
	return fmt.Sprintf("field %s is not valid for adapter type %s (only for %s)", name, typ, strings.Join(owners, ", "))
}
