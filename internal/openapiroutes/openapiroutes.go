// Package openapiroutes turns the x-agent-idempotency extension of an
// OpenAPI 3 document into drainer routes (drainer routes import).
package openapiroutes

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/goccy/go-yaml"
)

// Extension is the name of the operation extension read.
const Extension = "x-agent-idempotency"

// Classes of the extension. read_only operations are not routed.
const (
	ClassReadOnly            = "read_only"
	ClassNaturallyIdempotent = "naturally_idempotent"
	ClassKeyIdempotent       = "key_idempotent"
	ClassNonIdempotent       = "non_idempotent"
)

var classes = []string{ClassReadOnly, ClassNaturallyIdempotent, ClassKeyIdempotent, ClassNonIdempotent}

// Manifest is the x-agent-idempotency block of one operation.
type Manifest struct {
	Class          string        `json:"class"`
	KeyField       string        `json:"key_field"`
	KeyLocation    string        `json:"key_location"`
	TTLSeconds     *float64      `json:"ttl_seconds"`
	Scope          string        `json:"scope"`
	ReplayHeader   string        `json:"replay_header"`
	ReplayStatus   any           `json:"replay_status"`
	ConflictStatus any           `json:"conflict_status"`
	Compensation   *Compensation `json:"compensation"`
	AgentSafe      *bool         `json:"agent_safe"`
}

// Compensation is the triplet of a non_idempotent operation.
type Compensation struct {
	Operation     string   `json:"operation"`
	Detection     string   `json:"detection"`
	WindowSeconds *float64 `json:"window_seconds"`
}

// Route is one imported route.
type Route struct {
	Tool         string
	Pointer      string
	Class        string
	KeyTTL       time.Duration
	KeyName      string
	KeyLocation  string
	Compensation string
}

// Result is what Import found.
type Result struct {
	Routes []Route
	// ReadOnly lists the operationIds of read_only operations, not routed.
	ReadOnly []string
}

// Problem is one refusal, naming the file, the operation's JSON pointer and
// what is wrong.
type Problem struct {
	File, Pointer, Msg string
}

func (p *Problem) Error() string { return fmt.Sprintf("%s: %s: %s", p.File, p.Pointer, p.Msg) }

// Import reads an OpenAPI 3.0 or 3.1 document (YAML or JSON) and returns its
// routes, or every problem found, joined.
func Import(file string, data []byte) (res *Result, err error) {
	defer func() {
		// The loader handles untrusted input; a panic in it must not end the
		// command without a message.
		if r := recover(); r != nil {
			res, err = nil, fmt.Errorf("%s: cannot read the document as OpenAPI: %v", file, r)
		}
	}()
	if !looksLikeOpenAPI(data) {
		return nil, fmt.Errorf("%s: not an OpenAPI 3 document (no top-level \"openapi: 3.x\" field)", file)
	}
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = false
	doc, err := loader.LoadFromData(data)
	if err != nil {
		return nil, fmt.Errorf("%s: not a readable OpenAPI 3 document: %w", file, err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		return nil, fmt.Errorf("%s: not an OpenAPI 3 document (openapi is %q)", file, doc.OpenAPI)
	}
	return collect(file, doc)
}

// looksLikeOpenAPI checks the top-level openapi field before the loader runs,
// so a config file or a Swagger 2.0 document gets a clear message.
func looksLikeOpenAPI(data []byte) bool {
	var probe struct {
		OpenAPI any `json:"openapi" yaml:"openapi"`
	}
	if yaml.Unmarshal(data, &probe) != nil {
		return false
	}
	s := fmt.Sprint(probe.OpenAPI)
	return strings.HasPrefix(s, "3.")
}

type op struct {
	pointer, id string
	m           Manifest
}

func collect(file string, doc *openapi3.T) (*Result, error) {
	var ops []op
	var problems []error
	bad := func(ptr, format string, args ...any) {
		problems = append(problems, &Problem{File: file, Pointer: ptr, Msg: fmt.Sprintf(format, args...)})
	}
	byID := map[string]string{}
	if doc.Paths != nil {
		paths := doc.Paths.Map()
		for _, path := range slices.Sorted(maps.Keys(paths)) {
			item := paths[path]
			if item == nil {
				continue
			}
			ops2 := item.Operations()
			for _, method := range methodOrder(ops2) {
				o := ops2[method]
				ptr := "#/paths/" + escapePointer(path) + "/" + strings.ToLower(method)
				if o.OperationID != "" {
					if prev, dup := byID[o.OperationID]; dup {
						bad(ptr, "operationId %q is also used by %s", o.OperationID, prev)
						continue
					}
					byID[o.OperationID] = ptr
				}
				raw, ok := o.Extensions[Extension]
				if !ok {
					continue
				}
				if o.OperationID == "" {
					bad(ptr, "operationId: missing; an operation with %s needs one (it becomes the tool_name)", Extension)
					continue
				}
				m, err := decodeManifest(raw)
				if err != nil {
					bad(ptr, "%s: %v", Extension, err)
					continue
				}
				ops = append(ops, op{pointer: ptr, id: o.OperationID, m: m})
			}
		}
	}
	res := &Result{}
	routed := map[string]bool{}
	for _, o := range ops {
		if o.m.Class != ClassReadOnly && slices.Contains(classes, o.m.Class) {
			routed[o.id] = true
		}
	}
	for _, o := range ops {
		r, errs := route(o, routed)
		for _, e := range errs {
			bad(o.pointer, "%s", e)
		}
		switch {
		case len(errs) > 0:
		case o.m.Class == ClassReadOnly:
			res.ReadOnly = append(res.ReadOnly, o.id)
		default:
			res.Routes = append(res.Routes, r)
		}
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	if len(res.Routes) == 0 && len(res.ReadOnly) == 0 {
		return nil, fmt.Errorf("%s: no operation carries %s", file, Extension)
	}
	return res, nil
}

// route checks one manifest; every missing field is one message.
func route(o op, routed map[string]bool) (Route, []string) {
	m := o.m
	r := Route{Tool: o.id, Pointer: o.pointer, Class: m.Class}
	var errs []string
	miss := func(field, why string) {
		errs = append(errs, fmt.Sprintf("%s.%s: missing (%s)", Extension, field, why))
	}
	switch m.Class {
	case "":
		miss("class", "one of "+strings.Join(classes, ", "))
		return r, errs
	case ClassReadOnly, ClassNaturallyIdempotent:
	case ClassKeyIdempotent:
		const why = "required for key_idempotent"
		if m.KeyField == "" {
			miss("key_field", why)
		}
		if m.TTLSeconds == nil {
			miss("ttl_seconds", why)
		}
		if m.Scope == "" {
			miss("scope", why)
		}
		if m.ReplayHeader == "" && m.ReplayStatus == nil {
			miss("replay_header", why+": how a replay is marked (replay_header, or replay_status)")
		}
		if m.ConflictStatus == nil {
			miss("conflict_status", why)
		}
	case ClassNonIdempotent:
		switch c := m.Compensation; {
		case c == nil && (m.AgentSafe == nil || *m.AgentSafe):
			miss("compensation", "non_idempotent needs a compensation triplet {operation, detection, window_seconds}, or agent_safe: false")
		case c != nil:
			if c.Operation == "" {
				miss("compensation.operation", "the operationId of the compensating operation")
			} else if !routed[c.Operation] {
				errs = append(errs, fmt.Sprintf("%s.compensation.operation: %q is not an operation of this document with a routed %s class", Extension, c.Operation, Extension))
			}
			if c.Detection == "" {
				miss("compensation.detection", "how to tell whether the original succeeded")
			}
			if c.WindowSeconds == nil {
				miss("compensation.window_seconds", "the maximum reversal window")
			}
		}
	default:
		errs = append(errs, fmt.Sprintf("%s.class: unknown class %q; valid: %s", Extension, m.Class, strings.Join(classes, ", ")))
		return r, errs
	}
	if m.TTLSeconds != nil {
		s := *m.TTLSeconds
		switch {
		case s != float64(int64(s)) || s <= 60 || s > 10*365*24*3600:
			errs = append(errs, fmt.Sprintf("%s.ttl_seconds: must be a whole number of seconds above 60, got %s", Extension, strconv.FormatFloat(s, 'f', -1, 64)))
		case m.Class != ClassReadOnly:
			r.KeyTTL = time.Duration(s) * time.Second
		}
	}
	if m.KeyField != "" && m.Class != ClassReadOnly {
		loc := m.KeyLocation
		switch loc {
		case "":
			loc = "header"
		case "header", "query", "body":
		default:
			errs = append(errs, fmt.Sprintf("%s.key_location: must be header, query or body, got %q", Extension, m.KeyLocation))
		}
		if loc == "header" && !validHeaderName(m.KeyField) {
			errs = append(errs, fmt.Sprintf("%s.key_field: %q is not a valid header name", Extension, m.KeyField))
		}
		r.KeyName, r.KeyLocation = m.KeyField, loc
	}
	if m.ConflictStatus != nil && !validStatus(m.ConflictStatus) {
		errs = append(errs, fmt.Sprintf("%s.conflict_status: must be an HTTP status code", Extension))
	}
	if m.Compensation != nil && m.Class == ClassNonIdempotent {
		r.Compensation = m.Compensation.Operation
	}
	return r, errs
}

func decodeManifest(raw any) (Manifest, error) {
	var m Manifest
	b, err := json.Marshal(raw)
	if err != nil {
		return m, errors.New("cannot be read")
	}
	if !bytes.HasPrefix(bytes.TrimSpace(b), []byte("{")) {
		return m, errors.New("must be an object")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&m); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return m, fmt.Errorf("%s: wrong type (%s)", te.Field, te.Value)
		}
		return m, errors.New("cannot be read")
	}
	return m, nil
}

func validStatus(v any) bool {
	var n float64
	switch x := v.(type) {
	case float64:
		n = x
	case string:
		f, err := strconv.ParseFloat(x, 64)
		if err != nil {
			return false
		}
		n = f
	default:
		return false
	}
	return n == float64(int(n)) && n >= 100 && n <= 599
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// escapePointer escapes a path for a JSON pointer (RFC 6901).
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

var methods = []string{http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete, http.MethodOptions,
	http.MethodHead, http.MethodPatch, http.MethodTrace, "QUERY"}

func methodOrder(ops map[string]*openapi3.Operation) []string {
	var out []string
	for _, m := range methods {
		if ops[m] != nil {
			out = append(out, m)
		}
	}
	for m, o := range ops {
		if o != nil && !slices.Contains(methods, m) {
			out = append(out, m)
		}
	}
	return out
}
