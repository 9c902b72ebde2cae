package config

import (
	"net/url"
	"strings"
)

// keyHeaderTaken are headers the http adapter sets itself, so they cannot
// carry the key (Idempotency-Key can: it is the default carrier).
var keyHeaderTaken = map[string]bool{
	"x-agent-idempotency-tuple": true,
	"content-length":            true,
	"content-type":              true,
	"host":                      true,
	"transfer-encoding":         true,
	"user-agent":                true,
	"traceparent":               true,
}

// idempotencyKey checks a key placement at path (adapters.A.idempotency_key
// or routes.T.idempotency_key) against the http adapter a that sends it.
func (v *validator) idempotencyKey(path string, k *IdempotencyKey, a *Adapter) {
	if k == nil || !v.set(path) {
		return
	}
	loc := KeyLocationHeader
	if f := path + ".location"; v.set(f) {
		if !v.usable(f) {
			return
		}
		v.oneOf(f, k.Location, KeyLocationHeader, KeyLocationQuery, KeyLocationBody)
		loc = k.Location
	}
	f := path + ".name"
	if !v.require(f) {
		return
	}
	if k.Name == "" {
		v.errorf(f, "must not be empty")
		return
	}
	switch loc {
	case KeyLocationHeader:
		canon := strings.ToLower(k.Name)
		switch {
		case !validHeaderName(k.Name):
			v.errorf(f, "invalid header name (letters, digits and !#$%%&'*+-.^_`|~ only)")
		case keyHeaderTaken[canon]:
			v.errorf(f, "header %s is set by drainer on every request and cannot carry the key", k.Name)
		case a != nil && canon != "idempotency-key":
			for name := range a.Headers {
				if strings.ToLower(name) == canon {
					v.errorf(f, "header %s is also configured in adapters.%s.headers", k.Name, a.Name)
					break
				}
			}
		}
	case KeyLocationQuery:
		if a == nil || !v.usable("adapters."+a.Name+".url") {
			return
		}
		if u, err := url.Parse(strings.ReplaceAll(a.URL, "{tool_name}", "t")); err == nil && u.Query().Has(k.Name) {
			v.errorf(f, "query parameter %s is already in adapters.%s.url", k.Name, a.Name)
		}
	}
}

// routeKeyOverrides checks a route's key_ttl and idempotency_key.
func (v *validator) routeKeyOverrides(p string, r *Route) {
	if f := p + ".key_ttl"; v.usable(f) && r.KeyTTL <= KeyTTLMargin {
		v.errorf(f, "must exceed %s (a key_idempotent row stops being sent %s before its key expires), got %s",
			formatDuration(KeyTTLMargin), formatDuration(KeyTTLMargin), v.quoted(f))
	}
	f := p + ".idempotency_key"
	if !v.set(f) || !v.usable(p+".adapter") {
		return
	}
	a := v.cfg.Adapters[r.Adapter]
	if a == nil {
		return // unknown adapter: reported already
	}
	if a.Type != TypeHTTP {
		v.keyErrorf(f, "idempotency_key is valid only on routes whose adapter is http; adapter %s is %s", r.Adapter, a.Type)
		return
	}
	v.idempotencyKey(f, r.IdempotencyKey, a)
}
