package wire

import (
	"maps"
	"slices"
	"strings"
)

// SetByDrainer are the headers every HTTP adapter sets itself on every
// request (docs/reference.md §5): configured headers cannot override them.
var SetByDrainer = []string{
	"Idempotency-Key", "X-Agent-Idempotency-Tuple", "Content-Type", "Content-Length",
	"Host", "Transfer-Encoding",
}

// NotKeyCarriers are the headers that cannot carry the idempotency key:
// those drainer sets (Idempotency-Key excepted: it is the default carrier),
// User-Agent and traceparent.
var NotKeyCarriers = append(slices.DeleteFunc(slices.Clone(SetByDrainer), func(h string) bool {
	return h == "Idempotency-Key"
}), "User-Agent", "Traceparent")

// HeaderIn reports whether name is one of list, header names being
// case-insensitive.
func HeaderIn(name string, list []string) bool {
	return slices.ContainsFunc(list, func(h string) bool { return strings.EqualFold(h, name) })
}

// ValidHeaderName reports whether s is an RFC 9110 token, the syntax of
// header names.
func ValidHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// ValidHeaderValue reports whether v has no control character but tab.
func ValidHeaderValue(v string) bool {
	return !strings.ContainsFunc(v, func(r rune) bool { return (r < 0x20 && r != '\t') || r == 0x7f })
}

// CheckHeaders checks configured headers at path (e.g. headers): valid
// names, none of reserved (the adapter sets them), no name twice in
// another letter case, values without control characters. Messages never
// quote a value.
func CheckHeaders(c *Checker, path string, headers map[string]string, reserved []string) {
	lower := make(map[string]string)
	for _, name := range slices.Sorted(maps.Keys(headers)) {
		hp := Join(path, name)
		switch canon := strings.ToLower(name); {
		case !ValidHeaderName(name):
			c.KeyErrorf(hp, "%q is not a valid header name (letters, digits and !#$%%&'*+-.^_`|~ only)", name)
		case HeaderIn(name, reserved):
			c.KeyErrorf(hp, "header %s is set by drainer on every request and cannot be configured", name)
		case lower[canon] != "":
			c.KeyErrorf(hp, "header %s is also configured as %s (header names are case-insensitive)", name, lower[canon])
		default:
			lower[canon] = name
		}
		if c.Known(hp) && !ValidHeaderValue(headers[name]) {
			c.Errorf(hp, "header values cannot contain line breaks or other control characters (a tab is allowed)")
		}
	}
}

// Reveal returns a map of secrets as plain strings, for the wire.
func Reveal(m map[string]Secret) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v.Reveal()
	}
	return out
}

// Hide returns plain strings as secrets (settings set in Go).
func Hide(m map[string]string) map[string]Secret {
	if m == nil {
		return nil
	}
	out := make(map[string]Secret, len(m))
	for k, v := range m {
		out[k] = Secret(v)
	}
	return out
}

// BearerToken returns the token of an Authorization header value of the
// Bearer scheme, whose name is case-insensitive (RFC 9110 §11.1), with
// surrounding spaces removed; ok is false for another scheme or none.
func BearerToken(authorization string) (token string, ok bool) {
	scheme, rest, found := strings.Cut(strings.TrimSpace(authorization), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(rest), true
}
