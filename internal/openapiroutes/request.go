package openapiroutes

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/drainer-io/drainer/dispatch/webhook"
	"github.com/getkin/kin-openapi/openapi3"
)

// request carries an operation's method and path into its route: the
// method must be one an http route can send, the path a template the http
// adapter can expand, and each path parameter a declared, required string
// or integer (the row's payload supplies the path's values).
//
// What the body holds follows the JSON request body schema:
//   - it declares every path parameter: the payload is the body (body:
//     payload, the default), and each of them must be in its required list
//     (a row without it would fail unsent);
//   - it declares none: the payload without the path's fields is the body
//     (body: without_path_fields), as most REST APIs expect;
//   - it declares some but not all: the payload stays the body, so every
//     field the schema declares is sent and the undeclared path fields
//     travel with them (an API that ignores unknown fields accepts it);
//     with additionalProperties: false neither body is valid, and the
//     undeclared parameters are refused.
//
// An operation without a JSON request body (a DELETE) takes its path
// values from the payload and keeps the default.
func request(o op, r *Route) []string {
	var errs []string
	if !slices.Contains(webhook.Methods, o.method) {
		errs = append(errs, fmt.Sprintf("method %s cannot be routed: an http route sends %s", o.method, strings.Join(webhook.Methods, ", ")))
	}
	for _, name := range pathParams(o.path) {
		if strings.Contains(name, ".") {
			errs = append(errs, fmt.Sprintf("path %s: parameter {%s}: a drainer path reads {a.b} as field b of object field a, so a parameter named with a dot cannot be filled; rename it", o.path, name))
			return errs
		}
	}
	if _, err := webhook.ParsePath(o.path); err != nil {
		errs = append(errs, fmt.Sprintf("path %s: %v", o.path, err))
		return errs
	}
	r.Method, r.Path = o.method, o.path
	declared := map[string]*openapi3.Parameter{}
	for _, list := range []openapi3.Parameters{o.itemParams, o.op.Parameters} {
		for _, ref := range list {
			if ref != nil && ref.Value != nil && ref.Value.In == openapi3.ParameterInPath {
				declared[ref.Value.Name] = ref.Value
			}
		}
	}
	props, required, closed, hasBody := bodySchema(o.op)
	var inBody, notInBody []string
	for _, name := range pathParams(o.path) {
		p := declared[name]
		switch {
		case p == nil:
			errs = append(errs, fmt.Sprintf("path parameter {%s}: not declared in the operation's parameters", name))
			continue
		case !p.Required:
			errs = append(errs, fmt.Sprintf("path parameter {%s}: must be required (a path variable has no default)", name))
		}
		if t := paramType(p); t != "" {
			errs = append(errs, fmt.Sprintf("path parameter {%s}: of type %s; a path variable is filled from a string or an integer field", name, t))
		}
		if slices.Contains(props, name) {
			inBody = append(inBody, name)
		} else if !slices.Contains(notInBody, name) {
			notInBody = append(notInBody, name)
		}
	}
	if !hasBody {
		return errs
	}
	switch {
	case len(notInBody) > 0 && len(inBody) == 0:
		r.Body = webhook.BodyWithoutPathFields
	case len(notInBody) > 0 && closed:
		for _, name := range notInBody {
			errs = append(errs, fmt.Sprintf("path parameter {%s}: missing from the request body schema's properties, which declare {%s} and allow no other: neither the payload nor the payload without the path fields is a valid body",
				name, strings.Join(inBody, "}, {")))
		}
	}
	for _, name := range inBody {
		if !slices.Contains(required, name) {
			errs = append(errs, fmt.Sprintf("path parameter {%s}: not in the request body schema's required list (a row without it would fail unsent)", name))
		}
	}
	return errs
}

// paramType returns the schema type of a path parameter when it can never
// fill a path variable (not a string or an integer), else "".
func paramType(p *openapi3.Parameter) string {
	if p.Schema == nil || p.Schema.Value == nil || p.Schema.Value.Type == nil {
		return ""
	}
	types := p.Schema.Value.Type.Slice()
	if len(types) == 0 || slices.ContainsFunc(types, func(t string) bool { return t == openapi3.TypeString || t == openapi3.TypeInteger }) {
		return ""
	}
	return strings.Join(types, " or ")
}

// bodySchema returns the properties and required fields of the operation's
// JSON request body schema (allOf parts merged), and whether it allows no
// other property (additionalProperties: false); hasBody is false when it
// has no JSON request body.
func bodySchema(op *openapi3.Operation) (props, required []string, closed, hasBody bool) {
	if op.RequestBody == nil || op.RequestBody.Value == nil {
		return nil, nil, false, false
	}
	mt := op.RequestBody.Value.Content.Get("application/json")
	if mt == nil || mt.Schema == nil || mt.Schema.Value == nil {
		return nil, nil, false, false
	}
	props, required, closed = schemaProps(mt.Schema.Value)
	return props, required, closed, true
}

// schemaProps returns the properties and required fields of an object
// schema, its allOf parts merged, and whether it allows no other property
// (additionalProperties: false).
func schemaProps(schema *openapi3.Schema) (props, required []string, closed bool) {
	var walk func(s *openapi3.Schema, depth int)
	walk = func(s *openapi3.Schema, depth int) {
		if s == nil || depth > 8 {
			return
		}
		for name := range s.Properties {
			props = append(props, name)
		}
		required = append(required, s.Required...)
		if has := s.AdditionalProperties.Has; has != nil && !*has {
			closed = true
		}
		for _, part := range s.AllOf {
			if part != nil {
				walk(part.Value, depth+1)
			}
		}
	}
	walk(schema, 0)
	return props, required, closed
}

var pathParam = regexp.MustCompile(`\{([^{}]*)\}`)

// pathParams returns the variables of an OpenAPI path, in order.
func pathParams(path string) []string {
	var out []string
	for _, m := range pathParam.FindAllStringSubmatch(path, -1) {
		out = append(out, m[1])
	}
	return out
}

// detectionSyntax is the detection a probe can run: GET and a path whose
// only variables are the row's key and tool_name.
var detectionSyntax = regexp.MustCompile(`^GET\s+(/\S*)$`)

// detectProbe turns a compensation's detection into the route's detect
// probe URL when it can be expressed: "GET /path" whose variables are
// {key} and {tool_name} only, under the document's first absolute server
// URL. Otherwise it returns why not, for a comment in the output.
func detectProbe(detection, server string) (probe, why string) {
	m := detectionSyntax.FindStringSubmatch(strings.TrimSpace(detection))
	if m == nil {
		return "", "not a GET request of a path"
	}
	for _, v := range pathParams(m[1]) {
		if v != "key" && v != "tool_name" {
			return "", fmt.Sprintf("{%s} is not {key} or {tool_name}, the only variables of a detect probe", v)
		}
	}
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.ContainsAny(server, "{}") {
		return "", "the document has no absolute http(s) server URL to send it to"
	}
	return strings.TrimSuffix(server, "/") + m[1], ""
}
