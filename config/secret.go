package config

import (
	"log/slog"
	"regexp"
	"strings"
)

// Secret is a value that must not be printed: it comes from ${env:X} or
// ${file:/path} and is revealed only on the wire.
type Secret string

// String hides the value.
func (Secret) String() string { return "<redacted>" }

// GoString hides the value from %#v.
func (Secret) GoString() string { return "<redacted>" }

// MarshalText hides the value from encoders.
func (Secret) MarshalText() ([]byte, error) { return []byte("<redacted>"), nil }

// LogValue hides the value from log/slog.
func (Secret) LogValue() slog.Value { return slog.StringValue("<redacted>") }

// Reveal returns the value, for use at the wire only.
func (s Secret) Reveal() string { return string(s) }

// errInlineSecret is the message for a secret written in the config text.
const errInlineSecret = "secret values must come from ${env:NAME} or ${file:/path}, not the config text"

// dsnFields are the Secret fields holding a connection string: only their
// password must come from a reference, so a password-less DSN (peer or
// certificate authentication, a .pgpass file) may be written inline.
var dsnFields = map[string]bool{"database_url": true, "dsn": true}

// sensitiveHeader reports whether a header carries a credential: its value
// must then come from a reference.
func sensitiveHeader(name string) bool {
	n := strings.ToLower(name)
	if n == "authorization" || n == "proxy-authorization" {
		return true
	}
	for _, w := range []string{"token", "key", "secret", "password", "cookie"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// hasReference reports whether raw (a value as written) contains at least
// one ${env:…} or ${file:…} reference.
func hasReference(raw string) bool {
	segs, err := splitReferences(raw)
	if err != nil {
		return true // the syntax error is reported by expansion
	}
	for _, s := range segs {
		if s.scheme != "" {
			return true
		}
	}
	return false
}

// literalPassword reports whether a connection string or URL, as written,
// carries a password that is not entirely made of references: the userinfo
// password of a URL (scheme://user:PASSWORD@host), its password query
// parameter, or the password keyword of a libpq key/value string.
func literalPassword(raw string) bool {
	segs, err := splitReferences(raw)
	if err != nil {
		return false // the syntax error is reported by expansion
	}
	// Replace every reference by a NUL byte (never valid in a DSN) so the
	// characters of a reference (/ in a file path) cannot confuse the split.
	var b strings.Builder
	for _, s := range segs {
		if s.scheme != "" {
			b.WriteByte(0)
		} else {
			b.WriteString(s.text)
		}
	}
	s := b.String()
	// A password is literal when anything but references remains of it.
	literal := func(pw string) bool { return strings.ReplaceAll(pw, "\x00", "") != "" }

	if _, rest, ok := strings.Cut(s, "://"); ok {
		auth := rest
		if i := strings.IndexAny(auth, "/?#"); i >= 0 {
			auth = auth[:i]
		}
		if at := strings.LastIndexByte(auth, '@'); at >= 0 {
			if _, pw, ok := strings.Cut(auth[:at], ":"); ok && literal(pw) {
				return true
			}
		}
		_, query, _ := strings.Cut(rest, "?")
		query, _, _ = strings.Cut(query, "#")
		for _, kv := range strings.Split(query, "&") {
			if k, v, _ := strings.Cut(kv, "="); strings.EqualFold(k, "password") && literal(v) {
				return true
			}
		}
		return false
	}
	for _, m := range kvPassword.FindAllStringSubmatch(s, -1) {
		if literal(strings.Trim(m[1], "'")) {
			return true
		}
	}
	return false
}

// kvPassword finds the password keyword of a libpq key/value string.
var kvPassword = regexp.MustCompile(`(?i)(?:^|\s)password\s*=\s*('(?:[^'\\]|\\.)*'|\S*)`)
