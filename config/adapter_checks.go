package config

import (
	"fmt"
	"maps"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Checks of the type-specific adapter fields, one method per adapter type
// (listed in adapterKinds). Secret fields are checked by validator.secrets.
// Messages never quote URLs or connection strings: they may embed secrets.

// httpAdapter checks the URL template and the headers.
func (v *validator) httpAdapter(p string, a *Adapter) {
	if f := p + ".url"; v.require(f) {
		v.urlTemplate(f, a.URL)
	}
	v.idempotencyKey(p+".idempotency_key", a.IdempotencyKey, a)
	lower := make(map[string]string)
	for _, name := range slices.Sorted(maps.Keys(a.Headers)) {
		hp := p + ".headers." + name
		switch canon := strings.ToLower(name); {
		case !validHeaderName(name):
			v.keyErrorf(hp, "invalid header name (letters, digits and !#$%%&'*+-.^_`|~ only)")
		case reservedHeaders[canon]:
			v.keyErrorf(hp, "header %s is set by drainer on every request and cannot be configured", name)
		case lower[canon] != "":
			v.keyErrorf(hp, "header %s is also configured as %s (header names are case-insensitive)", name, lower[canon])
		default:
			lower[canon] = name
		}
		if v.usable(hp) && strings.ContainsAny(a.Headers[name].Reveal(), "\r\n\x00") {
			v.errorf(hp, "header values cannot contain line breaks or NUL")
		}
	}
}

// mcpAdapter checks an mcp adapter: url and headers as for http, except that
// the URL is the server's one endpoint (no {tool_name}) and the MCP transport
// headers are the adapter's own.
func (v *validator) mcpAdapter(p string, a *Adapter) {
	v.httpAdapter(p, a)
	if strings.Contains(a.URL, "{tool_name}") {
		v.errorf(p+".url", "an MCP server has one endpoint: {tool_name} is not a variable of an mcp url (the tool goes in tools/call)")
	}
	for _, name := range slices.Sorted(maps.Keys(a.Headers)) {
		if mcpReservedHeaders[strings.ToLower(name)] {
			v.keyErrorf(p+".headers."+name, "header %s is set by the mcp adapter and cannot be configured", name)
		}
	}
}

// mcpReservedHeaders are set by the mcp adapter's transport (docs/reference.md §5).
var mcpReservedHeaders = map[string]bool{
	"mcp-session-id":       true,
	"mcp-protocol-version": true,
	"accept":               true,
	"content-type":         true,
}

// reservedHeaders are set by the http adapter itself (docs/reference.md §5).
var reservedHeaders = map[string]bool{
	"idempotency-key":           true,
	"x-agent-idempotency-tuple": true,
	"content-length":            true,
}

var headerName = regexp.MustCompile("^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")

func validHeaderName(name string) bool { return headerName.MatchString(name) }

// urlVariable matches a {…} template variable.
var urlVariable = regexp.MustCompile(`\{[^{}]*\}`)

// urlTemplate checks an http adapter's URL: after expansion, an absolute
// http(s) URL whose only template variable is {tool_name}, in the path or
// query. Variables are looked for in the literal text only, so a message
// never shows part of an expanded value.
func (v *validator) urlTemplate(path, val string) {
	segs, _ := splitReferences(v.src[path].raw)
	for _, s := range segs {
		if s.scheme != "" {
			continue
		}
		for _, m := range urlVariable.FindAllString(s.text, -1) {
			if m != "{tool_name}" {
				v.errorf(path, "unknown URL variable %s; {tool_name} is the only one", m)
				return
			}
		}
	}
	const placeholder = "tool_name"
	u := strings.ReplaceAll(val, "{tool_name}", placeholder)
	if strings.ContainsAny(u, "{}") {
		v.errorf(path, "unbalanced { or } in the URL; {tool_name} is the only variable")
		return
	}
	if !v.absoluteURL(path, u) {
		return
	}
	if i := strings.Index(val, "{tool_name}"); i >= 0 && i < authorityEnd(val) {
		v.errorf(path, "{tool_name} may appear only in the URL's path or query")
	}
}

// absoluteURL checks an absolute http(s) URL without inline credentials.
func (v *validator) absoluteURL(path, val string) bool {
	u, err := url.Parse(val)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		v.errorf(path, "must be an absolute http:// or https:// URL")
		return false
	}
	if literalPassword(v.src[path].raw) {
		v.errorf(path, errInlineSecret)
		return false
	}
	return true
}

// authorityEnd is the index where a URL's scheme and host part ends.
func authorityEnd(s string) int {
	_, rest, ok := strings.Cut(s, "://")
	if !ok {
		return 0
	}
	start := len(s) - len(rest)
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		return start + i
	}
	return len(s)
}

var stripeVersion = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}(\.[a-z]+)?$`)

// stripeAdapter checks the API key's presence, the version pin and the
// base URL.
func (v *validator) stripeAdapter(p string, a *Adapter) {
	v.require(p + ".api_key")
	if f := p + ".stripe_version"; v.usable(f) && !stripeVersion.MatchString(a.StripeVersion) {
		v.errorf(f, `must be a Stripe API version like "2024-06-20", got %s`, v.quoted(f))
	}
	if f := p + ".base_url"; v.usable(f) {
		v.absoluteURL(f, a.BaseURL)
	}
	for tool, path := range a.Tools {
		if !stripePath.MatchString(path) {
			v.errorf(p+".tools."+tool, "must be a Stripe API path like /v1/charges, got %q", path)
		}
	}
}

// stripePath is a Stripe create endpoint: no object ids, no query.
var stripePath = regexp.MustCompile(`^/v1(/[a-z0-9_]+)+$`)

// sqlName is a plain Postgres identifier (quoted identifiers are not
// accepted: they are rarely meant and easy to get wrong in YAML).
var sqlName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]{0,62}$`)

// postgresAdapter checks the target database and table.
func (v *validator) postgresAdapter(p string, a *Adapter) {
	v.require(p + ".dsn")
	if f := p + ".table"; v.require(f) {
		schema, table, qualified := strings.Cut(a.Table, ".")
		if !qualified {
			schema, table = "", schema
		}
		if !sqlName.MatchString(table) || qualified && !sqlName.MatchString(schema) {
			v.errorf(f, "must be a table name, optionally schema-qualified (events or app.events), got %s", v.quoted(f))
		}
	}
}

// riverQueue is River's queue name syntax (river's validateQueueName).
var riverQueue = regexp.MustCompile(`^[a-z0-9]+(?:[_-]?[a-z0-9]+)*$`)

// riverAdapter checks the database, queue, job kind and schema.
func (v *validator) riverAdapter(p string, a *Adapter) {
	v.require(p + ".dsn")
	if f := p + ".job_kind"; v.require(f) && strings.TrimSpace(a.JobKind) == "" {
		v.errorf(f, "must not be empty")
	}
	if f := p + ".queue"; v.usable(f) && (len(a.Queue) > 64 || !riverQueue.MatchString(a.Queue)) {
		v.errorf(f, "must be a River queue name (at most 64 lower-case letters and digits, separated by _ or -), got %s", v.quoted(f))
	}
	if f := p + ".schema"; v.usable(f) && !sqlName.MatchString(a.Schema) {
		v.errorf(f, "must be a schema name, got %s", v.quoted(f))
	}
}

// natsAdapter checks the servers, subject and stream.
func (v *validator) natsAdapter(p string, a *Adapter) {
	if f := p + ".servers"; v.require(f) {
		if len(a.Servers) == 0 {
			v.errorf(f, "must list at least one server")
		}
		for i, s := range a.Servers {
			sp := fmt.Sprintf("%s[%d]", f, i)
			if !v.usable(sp) {
				continue
			}
			u, err := url.Parse(s)
			if err != nil || !slices.Contains([]string{"nats", "tls", "ws", "wss"}, u.Scheme) || u.Host == "" {
				v.errorf(sp, "must be a server URL like nats://host:4222 (schemes nats, tls, ws, wss)")
			} else if literalPassword(v.src[sp].raw) {
				v.errorf(sp, errInlineSecret)
			}
		}
	}
	if f := p + ".subject"; v.require(f) && !validSubject(a.Subject) {
		v.errorf(f, "must be a NATS subject to publish to (dot-separated tokens, no spaces or wildcards), got %s", v.quoted(f))
	}
	if f := p + ".stream"; v.usable(f) && (a.Stream == "" || strings.ContainsAny(a.Stream, " \t\r\n.*>/\\")) {
		v.errorf(f, `must be a JetStream stream name (no spaces, ".", "*", ">", "/" or "\"), got %s`, v.quoted(f))
	}
}

// validSubject accepts a publishable NATS subject.
func validSubject(s string) bool {
	if s == "" || strings.ContainsAny(s, " \t\r\n") {
		return false
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" || tok == "*" || tok == ">" {
			return false
		}
	}
	return true
}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// pluginAdapter checks the executable and its checksum.
func (v *validator) pluginAdapter(p string, a *Adapter) {
	if f := p + ".command"; v.require(f) && !filepath.IsAbs(a.Command) {
		v.errorf(f, "must be an absolute path, got %s", v.quoted(f))
	}
	if f := p + ".sha256"; v.usable(f) && !sha256Hex.MatchString(a.SHA256) {
		v.errorf(f, "must be 64 lower-case hex digits (the output of sha256sum)")
	}
}
