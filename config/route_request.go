package config

import (
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/drainer-io/drainer/dispatch/webhook"
)

// routeRequestFields are the route fields that shape an http request
// (docs/reference.md §4); the http adapter owns their syntax
// (webhook.ValidateMethod, webhook.ParsePath).
var routeRequestFields = []string{"method", "path", "query"}

// routeRequest checks a route's method, path and query: http routes only,
// a known method, a path template the http adapter can expand, and fixed
// query values (config only: no value is taken from the payload).
func (v *validator) routeRequest(p string, r *Route) {
	var written []string
	for _, name := range routeRequestFields {
		if v.set(p + "." + name) {
			written = append(written, name)
		}
	}
	if len(written) == 0 {
		return
	}
	if v.usable(p + ".adapter") {
		if a := v.cfg.Adapters[r.Adapter]; a != nil && a.Type != TypeHTTP {
			for _, name := range written {
				v.keyErrorf(p+"."+name, "%s is valid only on routes whose adapter is http; adapter %s is %s", name, r.Adapter, a.Type)
			}
			return
		}
	}
	if f := p + ".method"; v.usable(f) {
		if err := webhook.ValidateMethod(r.Method); err != nil {
			v.errorf(f, "%v", err)
		} else if r.Method == http.MethodDelete && v.keyInBody(r) {
			v.errorf(f, "a DELETE sends no body, so its idempotency key cannot travel in the body; place it in a header or the query")
		}
	}
	if f := p + ".path"; v.usable(f) {
		if v.src[f].refs > 0 {
			v.errorf(f, "a path is written in the config, not read from a reference")
		} else if _, err := webhook.ParsePath(r.Path); err != nil {
			v.errorf(f, "%v", err)
		} else if a := v.cfg.Adapters[r.Adapter]; a != nil && strings.Contains(a.URL, "{tool_name}") {
			// The mistake of a config written for POST url/{tool_name}
			// that then gains imported paths.
			v.warnf(f, "the path is appended to adapters.%s.url, which holds {tool_name}: requests go to .../%s%s; make that url the API's base", r.Adapter, "{tool_name}", r.Path)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(r.Query)) {
		f := p + ".query." + name
		switch val := r.Query[name]; {
		case name == "":
			v.keyErrorf(f, "empty query parameter name")
		case !v.usable(f):
		case strings.ContainsAny(val, "{}"):
			v.errorf(f, "query values are fixed in the config; a payload field cannot fill one (use a {field} in path, or leave it in the body)")
		case v.keyInQuery(r, name):
			v.keyErrorf(f, "query parameter %s also carries the idempotency key", name)
		}
	}
}

// keyPlacementOf is the idempotency_key that applies to route r: its own,
// else its adapter's; nil means the default header.
func (v *validator) keyPlacementOf(r *Route) *IdempotencyKey {
	if r.IdempotencyKey != nil {
		return r.IdempotencyKey
	}
	if a := v.cfg.Adapters[r.Adapter]; a != nil {
		return a.IdempotencyKey
	}
	return nil
}

// keyInBody reports whether r's key travels in the body.
func (v *validator) keyInBody(r *Route) bool {
	k := v.keyPlacementOf(r)
	return k != nil && k.Location == KeyLocationBody
}

// keyInQuery reports whether r's key travels as query parameter name.
func (v *validator) keyInQuery(r *Route, name string) bool {
	k := v.keyPlacementOf(r)
	return k != nil && k.Location == KeyLocationQuery && k.Name == name
}
