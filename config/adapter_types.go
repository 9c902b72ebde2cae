package config

import (
	"cmp"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/goccy/go-yaml/ast"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/wire"
	"github.com/drainer-io/drainer/outbox"
)

// Adapter types are registered by their packages in package dispatch (one
// table for `drainer check` and `drainer run`); config knows only the
// envelope, and decodes an adapter's other keys into its type's settings.

// AdapterTypes returns the valid adapter types, sorted.
func AdapterTypes() []string { return dispatch.KindTypes() }

// settingsFields maps the yaml keys of a type's settings to field indexes.
func settingsFields(k dispatch.Kind) (reflect.Type, map[string]int) {
	t := reflect.TypeOf(k.NewSettings()).Elem()
	return t, fieldsOf(t)
}

// adapterRouteKeys lists the route keys some adapter type owns (each
// kind's RouteKeys), sorted.
func adapterRouteKeys() []string {
	var keys []string
	for _, typ := range AdapterTypes() {
		k, _ := dispatch.KindOf(typ)
		for _, key := range k.RouteKeys {
			if !slices.Contains(keys, key) {
				keys = append(keys, key)
			}
		}
	}
	slices.Sort(keys)
	return keys
}

// keyOwners lists the adapter types whose settings (or, with route set,
// whose routes) accept the key name.
func keyOwners(name string, route bool) []string {
	var owners []string
	for _, typ := range AdapterTypes() {
		k, _ := dispatch.KindOf(typ)
		if route && slices.Contains(k.RouteKeys, name) {
			owners = append(owners, typ)
		}
		if _, fields := settingsFields(k); !route {
			if _, ok := fields[name]; ok {
				owners = append(owners, typ)
			}
		}
	}
	return owners
}

// adapter decodes an adapter: its type first, which decides the keys it
// accepts besides the envelope's; those go into the type's settings.
func (d *decoder) adapter(m *ast.MappingNode, path string, v reflect.Value) {
	a := v.Addr().Interface().(*Adapter)
	envelope := fieldsOf(adapterStruct)
	ents := d.entries(m, path, 0)
	for _, e := range ents {
		if e.key == "type" {
			d.field(e, join(path, e.key), v.FieldByName("Type"))
		}
	}
	kind, known := dispatch.KindOf(a.Type)
	var sv reflect.Value
	var own map[string]int
	if known {
		a.Settings = kind.NewSettings()
		sv = reflect.ValueOf(a.Settings).Elem()
		_, own = settingsFields(kind)
	}
	for _, e := range ents {
		p := join(path, e.key)
		i, isEnvelope := envelope[e.key]
		j, isOwn := own[e.key]
		owners := keyOwners(e.key, false)
		line, col := position(e.keyNode)
		switch {
		case e.key == "type":
		case isEnvelope:
			d.field(e, p, v.Field(i))
		case isOwn:
			d.field(e, p, sv.Field(j))
		case !known && len(owners) > 0:
			// The type is missing or unknown, and reported so; the
			// checks that do not depend on it still apply.
			d.untypedField(e, p, owners)
		case len(owners) > 0:
			d.errorAt(line, col, p, "field %s is not valid for adapter type %s (only for %s)", e.key, a.Type, strings.Join(owners, ", "))
		default:
			names := slices.Collect(maps.Keys(envelope))
			names = append(names, slices.Collect(maps.Keys(own))...)
			slices.Sort(names)
			d.errorAt(line, col, p, "%s", unknownFieldMessage(e.key, names))
		}
	}
}

// untypedField decodes key e of an adapter whose type is missing or
// unknown, when every type owning the key declares it alike (the same Go
// type and secret rule): into a struct of that one field, kept for the
// checks that do not depend on the type (secrets, validator.adapter). A key
// the owners declare differently is left unread: its meaning depends on
// the type.
func (d *decoder) untypedField(e entry, path string, owners []string) {
	var field reflect.StructField
	for i, typ := range owners {
		k, _ := dispatch.KindOf(typ)
		t, fields := settingsFields(k)
		f := t.Field(fields[e.key])
		if i > 0 && (f.Type != field.Type || f.Tag.Get("secret") != field.Tag.Get("secret")) {
			return
		}
		field = f
	}
	sv := reflect.New(reflect.StructOf([]reflect.StructField{{Name: "F", Type: field.Type, Tag: field.Tag}})).Elem()
	d.field(e, path, sv.Field(0))
	adapter := parentPath(path)
	if d.untyped == nil {
		d.untyped = make(map[string][]reflect.Value)
	}
	d.untyped[adapter] = append(d.untyped[adapter], sv)
}

// fieldSource is how the fields under prefix were written, for an
// adapter's checks (wire.Source).
type fieldSource struct {
	v      *validator
	prefix string
}

func (s fieldSource) Written(path string) (raw string, written, known bool) {
	src := s.v.src[join(s.prefix, path)]
	if src == nil {
		return "", false, false
	}
	return src.raw, true, !src.bad
}

// report turns an adapter's field errors under prefix into located errors.
func (v *validator) report(prefix string, errs wire.FieldErrors) {
	for _, e := range errs {
		p := wire.Join(prefix, e.Path)
		switch {
		case e.Warning:
			v.warnf(p, "%s", e.Msg)
		case e.AtKey:
			v.keyErrorf(p, "%s", e.Msg)
		default:
			v.errorf(p, "%s", e.Msg)
		}
	}
}

// adapterSettings checks an adapter's own keys with its type's rules.
func (v *validator) adapterSettings(p string, a *Adapter) {
	c := wire.NewChecker(fieldSource{v, p})
	c.CheckMode = v.check
	a.Settings.Check(c)
	v.report(p, c.Errs)
	v.secrets(p, reflect.ValueOf(a.Settings).Elem(), true)
}

// RoutesServedBy returns the routes adapter name serves, as their adapter
// or their fallback, sorted by tool: what its type checks and builds them
// with.
func (c *Config) RoutesServedBy(name string) []dispatch.RouteSpec {
	var out []dispatch.RouteSpec
	for _, tool := range slices.Sorted(maps.Keys(c.Routes)) {
		r := c.Routes[tool]
		if r == nil || name == "" || r.Adapter != name && r.Fallback != name {
			continue
		}
		out = append(out, c.routeSpec(tool, r, r.Adapter != name))
	}
	return out
}

func (c *Config) routeSpec(tool string, r *Route, fallback bool) dispatch.RouteSpec {
	return dispatch.RouteSpec{
		Tool: tool, Class: cmp.Or(r.Class, outbox.ClassKeyIdempotent), Fallback: fallback,
		Method: r.Method, Path: r.Path, Query: r.Query, Body: r.Body, IdempotencyKey: r.IdempotencyKey,
		Undoes: c.undone(tool),
	}
}

// undone lists the tools whose routes name tool as their compensation,
// sorted.
func (c *Config) undone(tool string) []string {
	var out []string
	for _, t := range slices.Sorted(maps.Keys(c.Routes)) {
		if r := c.Routes[t]; r != nil && r.Compensation == tool {
			out = append(out, t)
		}
	}
	return out
}

// routeAdapterKeys checks the keys of route r that belong to its adapter's
// type (an http route's method, path, query, body and idempotency_key), and lets
// each adapter serving the route check it.
func (v *validator) routeAdapterKeys(p, tool string, r *Route) {
	a := v.cfg.Adapters[r.Adapter]
	if v.usable(p+".adapter") && a != nil && a.Settings != nil {
		kind, _ := dispatch.KindOf(a.Type)
		for _, key := range adapterRouteKeys() {
			if v.set(p+"."+key) && !slices.Contains(kind.RouteKeys, key) {
				v.keyErrorf(p+"."+key, "%s is valid only on routes whose adapter is %s; adapter %s is %s",
					key, strings.Join(keyOwners(key, true), " or "), r.Adapter, a.Type)
			}
		}
	}
	for _, serve := range []struct {
		name     string
		fallback bool
	}{{r.Adapter, false}, {r.Fallback, true}} {
		a := v.cfg.Adapters[serve.name]
		if serve.name == "" || a == nil || a.Settings == nil {
			continue
		}
		if kind, _ := dispatch.KindOf(a.Type); kind.CheckRoute != nil {
			c := wire.NewChecker(fieldSource{v, p})
			c.CheckMode = v.check
			kind.CheckRoute(c, serve.name, a.Settings, v.cfg.routeSpec(tool, r, serve.fallback))
			v.report(p, c.Errs)
		}
	}
}
