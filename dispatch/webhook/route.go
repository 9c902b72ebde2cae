package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/drainer-io/drainer/dispatch"
	"github.com/drainer-io/drainer/dispatch/wire"
)

// Methods a route may use (docs/reference.md §4); POST is the default.
var Methods = []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// Route is how one tool_name is sent: its method, a path appended to the
// adapter's URL, fixed query parameters and what of the payload is the
// body. The zero Route is the adapter's default: POST to the URL as
// configured.
//
// What becomes the body: POST, PUT and PATCH send the row's payload as is
// (BodyPayload: the fields used in the path stay in it, a provider may
// check them against the path), or the payload object without the
// top-level fields its path reads (BodyWithoutPathFields, for APIs whose
// body schema does not declare them); DELETE sends no body and no
// Content-Type whatever Body says (the payload only supplies the path
// fields), so its key travels in a header or the query, never in the body.
type Route struct {
	// Method is POST, PUT, PATCH or DELETE; "" means POST.
	Method string
	// Path is a template appended to the adapter's URL path, beginning with
	// "/": {tool_name} and {field} (a top-level field of the payload) are its
	// variables, each value escaped inside its one segment.
	Path string
	// Query holds fixed query parameters, added to the adapter's URL query.
	Query map[string]string
	// Body is BodyPayload or BodyWithoutPathFields; "" means BodyPayload.
	Body string
}

// Body modes of a route (docs/reference.md §4): what of the payload a POST,
// PUT or PATCH sends as its body.
const (
	// BodyPayload sends the payload as is (the default).
	BodyPayload = "payload"
	// BodyWithoutPathFields sends the payload object without the top-level
	// fields the path template reads ({tool_name} is not one).
	BodyWithoutPathFields = "without_path_fields"
)

// BodyModes are the values of a route's body key, the default first.
var BodyModes = []string{BodyPayload, BodyWithoutPathFields}

// method returns the route's method, POST by default.
func (r Route) method() string {
	if r.Method == "" {
		return http.MethodPost
	}
	return r.Method
}

// hasBody reports whether the route sends the payload as the body.
func (r Route) hasBody() bool { return r.method() != http.MethodDelete }

// ValidateMethod checks a route's method.
func ValidateMethod(m string) error {
	if !slices.Contains(Methods, m) {
		return fmt.Errorf("must be one of %s, got %q", strings.Join(Methods, ", "), m)
	}
	return nil
}

// pathVarName is the syntax of a {field} name: a JSON object key a config
// can spell unambiguously.
var pathVarName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// PathTemplate is a parsed route path: literal text and variables in turn.
type PathTemplate struct {
	parts []pathPart
}

type pathPart struct {
	literal string
	field   string // "" for a literal; toolNameField for {tool_name}
}

// toolNameField names the {tool_name} variable among path parts.
const toolNameField = "tool_name"

// ParsePath parses a route path template. It refuses a path not beginning
// with "/", a query or fragment in it (fixed parameters go in Query), an
// unbalanced or nested brace, an empty or malformed variable name, and
// control characters or spaces in its literal text. Messages quote the
// offending variable or character, never the whole path.
func ParsePath(tmpl string) (*PathTemplate, error) {
	if !strings.HasPrefix(tmpl, "/") {
		return nil, errors.New(`must begin with "/" (it is appended to the adapter's url)`)
	}
	t := &PathTemplate{}
	rest := tmpl
	for rest != "" {
		open := strings.IndexByte(rest, '{')
		if close := strings.IndexByte(rest, '}'); close >= 0 && (open < 0 || close < open) {
			return nil, errors.New(`unbalanced "}": a variable is written {name}`)
		}
		if open < 0 {
			t.parts = append(t.parts, pathPart{literal: rest})
			break
		}
		if open > 0 {
			t.parts = append(t.parts, pathPart{literal: rest[:open]})
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return nil, errors.New(`unbalanced "{": a variable is written {name}`)
		}
		name := rest[open+1 : open+end]
		switch {
		case strings.ContainsRune(name, '{'):
			return nil, errors.New("nested braces: a variable is written {name}, one level")
		case name == "":
			return nil, errors.New("empty variable {}: name a top-level payload field")
		case !validVarName(name):
			return nil, fmt.Errorf("variable {%s}: a name is letters, digits, _ and -, not starting with a digit or -; a field of an object field is written {object.field}", name)
		}
		t.parts = append(t.parts, pathPart{field: name})
		rest = rest[open+end+1:]
	}
	for _, p := range t.parts {
		if p.field != "" {
			continue
		}
		if i := strings.IndexAny(p.literal, "?#"); i >= 0 {
			return nil, fmt.Errorf("%q in the path: fixed query parameters go in query, a fragment is never sent", p.literal[i:i+1])
		}
		if strings.ContainsFunc(p.literal, func(r rune) bool { return unicode.IsControl(r) || r == ' ' }) {
			return nil, errors.New("control character or space in the path; escape it (%20) or use a variable")
		}
		if !utf8.ValidString(p.literal) {
			return nil, errors.New("path is not valid UTF-8")
		}
	}
	for seg := range strings.SplitSeq(tmpl, "/") {
		if seg == "." || seg == ".." {
			return nil, fmt.Errorf("segment %q in the path: write the path it resolves to", seg)
		}
	}
	return t, nil
}

// Fields returns the payload fields the template reads, in order, without
// {tool_name}.
func (t *PathTemplate) Fields() []string {
	var out []string
	for _, p := range t.parts {
		if p.field != "" && p.field != toolNameField && !slices.Contains(out, p.field) {
			out = append(out, p.field)
		}
	}
	return out
}

// FieldError is a payload that cannot fill a path variable: the field is
// missing, of another type than string or integer, or a value that cannot
// be a segment. It names the field, never its value.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("path variable {%s}: %s; nothing sent", e.Field, e.Reason)
}

// Expand fills the template from tool and payload. Each value is escaped
// with url.PathEscape, so "/", "?", "#", "%" and spaces stay inside its one
// segment. It returns a *FieldError when the payload cannot fill it.
func (t *PathTemplate) Expand(tool string, payload []byte) (string, error) {
	var obj map[string]json.RawMessage
	if len(t.Fields()) > 0 {
		trimmed := bytes.TrimLeft(payload, " \t\r\n")
		if len(trimmed) == 0 || trimmed[0] != '{' || json.Unmarshal(trimmed, &obj) != nil {
			return "", &FieldError{Field: t.Fields()[0], Reason: "the payload is not a JSON object"}
		}
	}
	var b strings.Builder
	for _, p := range t.parts {
		switch p.field {
		case "":
			b.WriteString(p.literal)
		case toolNameField:
			b.WriteString(url.PathEscape(tool))
		default:
			v, err := segmentValue(obj, p.field)
			if err != nil {
				return "", err
			}
			b.WriteString(url.PathEscape(v))
		}
	}
	return b.String(), nil
}

// validVarName reports a variable name: a field name, or a dotted path of
// field names through object fields ({forward_response.id}).
func validVarName(name string) bool {
	for part := range strings.SplitSeq(name, ".") {
		if !pathVarName.MatchString(part) {
			return false
		}
	}
	return true
}

// segmentValue reads field of obj as a path segment value: a top-level
// field, or with dots a field of an object field.
func segmentValue(obj map[string]json.RawMessage, field string) (string, error) {
	raw, ok := fieldValue(obj, field)
	switch {
	case !ok && strings.Contains(field, "."):
		return "", &FieldError{Field: field, Reason: "the payload has no such field (each step before the last an object field)"}
	case !ok:
		return "", &FieldError{Field: field, Reason: "the payload has no such top-level field"}
	}
	raw = bytes.TrimSpace(raw)
	var s string
	switch {
	case len(raw) > 0 && raw[0] == '"':
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", &FieldError{Field: field, Reason: "the value is not a valid JSON string"}
		}
	case integerLiteral.Match(raw):
		s = string(raw)
	default:
		return "", &FieldError{Field: field, Reason: "the value is " + jsonKind(raw) + ", not a string or an integer"}
	}
	switch {
	case s == "":
		return "", &FieldError{Field: field, Reason: "the value is empty"}
	case s == "." || s == "..":
		return "", &FieldError{Field: field, Reason: "the value is a dot segment (. or ..)"}
	case strings.ContainsFunc(s, unicode.IsControl):
		return "", &FieldError{Field: field, Reason: "the value holds a control character"}
	case !utf8.ValidString(s):
		return "", &FieldError{Field: field, Reason: "the value is not valid UTF-8"}
	}
	return s, nil
}

// fieldValue looks field up in obj, following a dotted path through object
// fields; ok is false when a step is missing or not an object.
func fieldValue(obj map[string]json.RawMessage, field string) (raw json.RawMessage, ok bool) {
	top, rest, nested := strings.Cut(field, ".")
	if raw, ok = obj[top]; !ok || !nested {
		return raw, ok
	}
	var inner map[string]json.RawMessage
	if t := bytes.TrimLeft(raw, " \t\r\n"); len(t) == 0 || t[0] != '{' || json.Unmarshal(t, &inner) != nil {
		return nil, false
	}
	return fieldValue(inner, rest)
}

// integerLiteral is a JSON number without fraction or exponent.
var integerLiteral = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

// jsonKind names the type of a JSON value for messages.
func jsonKind(raw []byte) string {
	if len(raw) == 0 {
		return "missing"
	}
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	default:
		return "a number with a fraction or exponent"
	}
}

// unsendable is the Result of a row whose payload cannot fill its route's
// path: terminal, nothing sent (dispatch.ReasonUnsendable).
func unsendable(err error) dispatch.Result {
	return dispatch.Result{Outcome: dispatch.Terminal, NotSent: true, Reason: dispatch.ReasonUnsendable, Err: err}
}

// checkRoute checks one tool's route at path against the key placement
// that applies to it.
func checkRoute(c *wire.Checker, path string, r Route, place KeyPlacement) {
	if mp := wire.Join(path, "method"); r.Method != "" && c.Known(mp) {
		if err := ValidateMethod(r.Method); err != nil {
			c.Errorf(mp, "%v", err)
		} else if !r.hasBody() && place.Location == LocationBody {
			c.Errorf(mp, "a DELETE sends no body, so its idempotency key cannot travel in the body; place it in a header or the query")
		}
	}
	if pp := wire.Join(path, "path"); r.Path != "" && c.Known(pp) {
		if c.FromReference(pp) {
			c.Errorf(pp, "a path is written in the config, not read from a reference")
		} else if _, err := ParsePath(r.Path); err != nil {
			c.Errorf(pp, "%v", err)
		}
	}
	if bp := wire.Join(path, "body"); c.Set(bp, r.Body == "") && c.Known(bp) {
		if !slices.Contains(BodyModes, r.Body) {
			c.Errorf(bp, "must be one of %s, got %s", strings.Join(BodyModes, ", "), c.Quote(bp, r.Body))
		} else if t, err := ParsePath(r.Path); err == nil && r.Body == BodyWithoutPathFields &&
			place.Location == LocationBody && slices.Contains(t.Fields(), place.Name) {
			c.Errorf(bp, "path field {%s} also carries the idempotency key in the body; without_path_fields would send the key in its place", place.Name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(r.Query)) {
		qp := wire.Join(path, "query."+name)
		switch {
		case name == "":
			c.KeyErrorf(qp, "empty query parameter name")
		case !c.Known(qp):
		case strings.ContainsAny(r.Query[name], "{}"):
			c.Errorf(qp, "query values are fixed in the config; a payload field cannot fill one (use a {field} in path, or leave it in the body)")
		case place.Location == LocationQuery && place.Name == name:
			c.KeyErrorf(qp, "query parameter %s also carries the idempotency key", name)
		}
	}
}

// compiledRoute is a Route ready to send: its path parsed (nil: none), its
// query encoded, and the payload fields its body leaves out.
type compiledRoute struct {
	Route
	path  *PathTemplate
	query string
	omit  []string
}

// compile prepares a validated route.
func compile(r Route) compiledRoute {
	c := compiledRoute{Route: r}
	if r.Path != "" {
		c.path, _ = ParsePath(r.Path) // validated by Config.Validate
		if r.Body == BodyWithoutPathFields {
			// top-level fields only: {a.b} leaves object a in the body
			c.omit = slices.DeleteFunc(c.path.Fields(), func(f string) bool { return strings.Contains(f, ".") })
		}
	}
	if len(r.Query) > 0 {
		q := url.Values{}
		for k, v := range r.Query {
			q.Set(k, v)
		}
		c.query = q.Encode()
	}
	return c
}

// body returns what the route sends as the body of payload: nil for a
// DELETE; the payload without the fields in omit when there are any (the
// path's expansion has proven it a JSON object); else the payload as is.
func (r compiledRoute) body(payload []byte) ([]byte, error) {
	switch {
	case !r.hasBody():
		return nil, nil
	case len(r.omit) == 0:
		return payload, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(payload, &obj); err != nil {
		return nil, &FieldError{Field: r.omit[0], Reason: "the payload is not a JSON object"}
	}
	for _, f := range r.omit {
		delete(obj, f)
	}
	// SetEscapeHTML(false): the payload's strings keep their bytes.
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(obj); err != nil {
		return nil, fmt.Errorf("body without the path fields: re-encode payload: %w", err)
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

// joinQuery appends an encoded query to another.
func joinQuery(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "&" + b
}
