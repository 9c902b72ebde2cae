package wire

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
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

// ErrInlineSecret is the message for a secret written in the config text.
const ErrInlineSecret = "secret values must come from ${env:NAME} or ${file:/path}, not the config text"

// The secret rules of a settings field, given by its struct tag
// `secret:"…"` (see SecretRule).
const (
	// SecretReference: the whole value must come from references (the
	// default of a Secret field).
	SecretReference = "reference"
	// SecretPassword: only a password inside the value (a URL's userinfo or
	// password parameter, a libpq password keyword) must come from a
	// reference; a password-less connection string may be written inline.
	SecretPassword = "password"
	// SecretQuery: the value is an http(s) URL; only the values of its
	// query parameters named like a credential (CredentialParam: api_key,
	// token, sig, …) must come from references.
	SecretQuery = "query"
)

// Segment is a piece of a string value as written: literal text or a
// reference.
type Segment struct {
	// Text is the literal text, or the reference as written (${env:X}).
	Text string
	// Scheme is "env" or "file" for a reference, "" for literal text.
	Scheme string
	// Arg is the variable name or the file path of a reference.
	Arg string
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// SplitReferences cuts a value as written into literal text and references:
//
//	${env:NAME}     the environment variable NAME
//	${file:/path}   the file's content
//	$${             a literal "${"
//
// Its error messages quote at most the reference text, never literal text
// (which may be a secret written inline by mistake).
func SplitReferences(s string) ([]Segment, error) {
	var segs []Segment
	var lit strings.Builder
	for len(s) > 0 {
		i := strings.IndexByte(s, '$')
		if i < 0 {
			lit.WriteString(s)
			break
		}
		lit.WriteString(s[:i])
		s = s[i:]
		switch {
		case strings.HasPrefix(s, "$${"):
			lit.WriteString("${")
			s = s[3:]
			continue
		case !strings.HasPrefix(s, "${"):
			lit.WriteByte('$')
			s = s[1:]
			continue
		}
		ref, err := parseReference(s)
		if err != nil {
			return nil, err
		}
		if lit.Len() > 0 {
			segs = append(segs, Segment{Text: lit.String()})
			lit.Reset()
		}
		segs = append(segs, ref)
		s = s[len(ref.Text):]
	}
	if lit.Len() > 0 {
		segs = append(segs, Segment{Text: lit.String()})
	}
	return segs, nil
}

// parseReference reads the reference s starts with ("${…}").
func parseReference(s string) (Segment, error) {
	end := strings.IndexByte(s, '}')
	if end < 0 {
		return Segment{}, errors.New(`unterminated "${" (a reference ends with "}"; write "$${" for a literal "${")`)
	}
	ref := s[:end+1]
	scheme, arg, ok := strings.Cut(s[2:end], ":")
	switch {
	case !ok:
		return Segment{}, fmt.Errorf("reference %s has no scheme; use ${env:NAME} or ${file:/path}", ref)
	case scheme == "env" && !envName.MatchString(arg):
		return Segment{}, fmt.Errorf("invalid environment variable name in %s", ref)
	case scheme == "file" && !filepath.IsAbs(arg):
		return Segment{}, fmt.Errorf("%s must name an absolute path", ref)
	case scheme != "env" && scheme != "file":
		return Segment{}, fmt.Errorf("unknown reference scheme %q in %s; use ${env:NAME} or ${file:/path}", scheme, ref)
	}
	return Segment{Text: ref, Scheme: scheme, Arg: arg}, nil
}

// Literal returns the literal text of a value as written, its references
// left out, so that a check of the text never reads an expanded value.
func Literal(raw string) string {
	segs, err := SplitReferences(raw)
	if err != nil {
		return ""
	}
	var b strings.Builder
	for _, s := range segs {
		if s.Scheme == "" {
			b.WriteString(s.Text)
		}
	}
	return b.String()
}

// HasReference reports whether raw (a value as written) contains at least
// one ${env:…} or ${file:…} reference.
func HasReference(raw string) bool {
	segs, err := SplitReferences(raw)
	if err != nil {
		return true // the syntax error is reported by expansion
	}
	for _, s := range segs {
		if s.Scheme != "" {
			return true
		}
	}
	return false
}

// LiteralPassword reports whether a connection string or URL, as written,
// carries a password that is not entirely made of references: the userinfo
// password of a URL (scheme://user:PASSWORD@host), its password query
// parameter, or the password keyword of a libpq key/value string.
func LiteralPassword(raw string) bool {
	segs, err := SplitReferences(raw)
	if err != nil {
		return false // the syntax error is reported by expansion
	}
	// Replace every reference by a NUL byte (never valid in a DSN) so the
	// characters of a reference (/ in a file path) cannot confuse the split.
	var b strings.Builder
	for _, s := range segs {
		if s.Scheme != "" {
			b.WriteByte(0)
		} else {
			b.WriteString(s.Text)
		}
	}
	s := b.String()
	if _, rest, ok := strings.Cut(s, "://"); ok {
		return urlPassword(rest)
	}
	for _, m := range kvPassword.FindAllStringSubmatch(s, -1) {
		if literal(strings.Trim(m[1], "'")) {
			return true
		}
	}
	return false
}

// literal reports whether anything but references (NUL bytes) remains of a
// password.
func literal(pw string) bool { return strings.ReplaceAll(pw, "\x00", "") != "" }

// urlPassword reports a literal password in a URL after its "://".
func urlPassword(rest string) bool {
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

// kvPassword finds the password keyword of a libpq key/value string.
var kvPassword = regexp.MustCompile(`(?i)(?:^|\s)password\s*=\s*('(?:[^'\\]|\\.)*'|\S*)`)

// SensitiveHeader reports whether a header carries a credential: its value
// must then come from a reference. Such a name holds auth (Authorization,
// X-Auth; not author), secret, token, key, password, passwd, signature,
// session, cookie or credential; the headers of the idempotency key
// (Idempotency-Key, X-Idempotency-Key) are not credentials.
func SensitiveHeader(name string) bool {
	n := strings.ToLower(name)
	if strings.Contains(n, "idempotency") {
		return false
	}
	return hasAuth(n) || containsAny(n, "secret", "token", "key", "password", "passwd", "signature", "session", "cookie", "credential")
}

// CredentialParam reports whether a URL query parameter's name says its
// value is a credential: with '-', '_' and '.' left out and letters in
// lower case, it holds token, secret, password, passwd, signature,
// credential or auth (not author), it is key, sig or pwd, or it ends in key
// after a word of credentials (apikey, x-api-key, access_key,
// subscription-key; not sort_key nor idempotency_key).
func CredentialParam(name string) bool {
	n := strings.NewReplacer("-", "", "_", "", ".", "").Replace(strings.ToLower(name))
	switch {
	case n == "key" || n == "sig" || n == "pwd":
		return true
	case hasAuth(n) || containsAny(n, "token", "secret", "password", "passwd", "signature", "credential"):
		return true
	}
	before, ok := strings.CutSuffix(n, "key")
	return ok && slices.ContainsFunc([]string{"api", "access", "secret", "private", "client", "app", "auth",
		"master", "signing", "subscription", "account", "shared", "sas"}, func(w string) bool { return strings.HasSuffix(before, w) })
}

// InlineQuerySecret returns the name of the first query parameter of an
// http(s) URL, as written, that is named like a credential
// (CredentialParam) and whose value holds literal text besides references
// and {…} template variables; ok is false when there is none. The value
// is never returned.
func InlineQuerySecret(raw string) (name string, ok bool) {
	segs, err := SplitReferences(raw)
	if err != nil {
		return "", false // the syntax error is reported by expansion
	}
	// A reference becomes a NUL byte, which no URL holds, as in
	// LiteralPassword.
	var b strings.Builder
	for _, s := range segs {
		if s.Scheme != "" {
			b.WriteByte(0)
		} else {
			b.WriteString(s.Text)
		}
	}
	_, query, found := strings.Cut(b.String(), "?")
	if !found {
		return "", false
	}
	query, _, _ = strings.Cut(query, "#")
	for kv := range strings.SplitSeq(query, "&") {
		k, v, _ := strings.Cut(kv, "=")
		if uk, err := url.QueryUnescape(k); err == nil {
			k = uk
		}
		if CredentialParam(k) && literal(templateVar.ReplaceAllString(v, "")) {
			return strings.ReplaceAll(k, "\x00", "${…}"), true
		}
	}
	return "", false
}

// hasAuth reports whether n (in lower case) holds auth other than at the
// start of author or authority: authorization and authorize count.
func hasAuth(n string) bool {
	for rest := n; ; {
		i := strings.Index(rest, "auth")
		if i < 0 {
			return false
		}
		rest = rest[i:]
		if !strings.HasPrefix(rest, "author") || strings.HasPrefix(rest, "authoriz") || strings.HasPrefix(rest, "authoris") {
			return true
		}
		rest = rest[len("auth"):]
	}
}

// containsAny reports whether s holds one of words.
func containsAny(s string, words ...string) bool {
	return slices.ContainsFunc(words, func(w string) bool { return strings.Contains(s, w) })
}
