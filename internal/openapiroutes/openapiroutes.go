package openapiroutes

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
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

// Route is one imported route.
type Route struct {
	Tool         string
	Pointer      string
	Class        string
	KeyTTL       time.Duration
	KeyName      string
	KeyLocation  string
	Compensation string
	// CompensationWindow is the compensation's window_seconds, the
	// route's compensation_window; 0 when there is no compensation.
	CompensationWindow time.Duration
	// Method and Path are the operation's, for the route's method and path.
	Method, Path string
	// Body is the route's body key: "" for the default (the payload is the
	// body), webhook.BodyWithoutPathFields when the operation's request
	// body schema declares none of the path parameters.
	Body string
	// Detection is the compensation's detection as written; Detect is the
	// detect probe URL it becomes, or "" with DetectNote saying why not.
	Detection, Detect, DetectNote string
	// Unsafe marks an agent_safe: false operation routed on request.
	Unsafe bool
	// Undoes lists the routes whose compensation this one is; its path's
	// parameters (FromForward) are then read from the forward call's
	// answer, {forward_response.NAME}: a compensation's payload is
	// forward_key, forward_payload and forward_response.
	Undoes, FromForward []string
}

// Options tune Import.
type Options struct {
	// AllowUnsafe routes agent_safe: false operations (with a comment)
	// instead of refusing them.
	AllowUnsafe bool
}

// Result is what Import found.
type Result struct {
	// Server is the document's first server URL, the base URL the routes'
	// paths are appended to (the http adapter's url), or "".
	Server string
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
// routes, or every problem found, joined. A YAML or JSON syntax error is
// reported as FILE:LINE:COL.
func Import(file string, data []byte, opts Options) (res *Result, err error) {
	defer func() {
		// The loader handles untrusted input; a panic in it must not end the
		// command without a message.
		if r := recover(); r != nil {
			res, err = nil, fmt.Errorf("%s: cannot read the document as OpenAPI: %v", file, r)
		}
	}()
	if err := syntaxError(file, data); err != nil {
		return nil, err
	}
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
	return collect(file, doc, opts)
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

// op is one operation carrying the extension.
type op struct {
	pointer, id  string
	method, path string
	server       string
	op           *openapi3.Operation
	itemParams   openapi3.Parameters
	m            Manifest
	// bad marks manifest fields of the wrong type; errs are the manifest's
	// decoding problems (unknown fields, wrong types).
	bad  map[string]bool
	errs []string
	// dup is set when another operation has the same operationId: its
	// problems are reported, but it is not routed.
	dup bool
}

func collect(file string, doc *openapi3.T, opts Options) (*Result, error) {
	server := ""
	if len(doc.Servers) > 0 && doc.Servers[0] != nil {
		server = doc.Servers[0].URL
	}
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
				dup := false
				if o.OperationID != "" {
					if prev, seen := byID[o.OperationID]; seen {
						bad(ptr, "operationId %q is also used by %s", o.OperationID, prev)
						dup = true
					} else {
						byID[o.OperationID] = ptr
					}
				}
				raw, ok := o.Extensions[Extension]
				if !ok {
					continue
				}
				if o.OperationID == "" {
					bad(ptr, "operationId: missing; an operation with %s needs one (it becomes the tool_name)", Extension)
				}
				m, badFields, errs := decodeManifest(normalize(raw))
				ops = append(ops, op{pointer: ptr, id: o.OperationID, method: method, path: path, server: server,
					op: o, itemParams: item.Parameters, m: m, bad: badFields, errs: errs, dup: dup || o.OperationID == ""})
			}
		}
	}
	res := &Result{Server: server}
	routed := map[string]bool{}
	for _, o := range ops {
		if !o.dup && o.m.Class != ClassReadOnly && slices.Contains(classes, o.m.Class) {
			routed[o.id] = true
		}
	}
	for _, o := range ops {
		r, errs := route(o, routed, opts)
		for _, e := range errs {
			bad(o.pointer, "%s", e)
		}
		switch {
		case len(errs) > 0 || o.dup:
		case o.m.Class == ClassReadOnly:
			res.ReadOnly = append(res.ReadOnly, o.id)
		default:
			res.Routes = append(res.Routes, r)
		}
	}
	readFromForward(res.Routes, answersOf(ops))
	if len(problems) == 0 {
		problems = checkAsConfig(file, res)
	}
	if len(problems) > 0 {
		slices.SortStableFunc(problems, func(a, b error) int {
			return strings.Compare(a.(*Problem).Pointer, b.(*Problem).Pointer)
		})
		return nil, errors.Join(problems...)
	}
	if len(res.Routes) == 0 && len(res.ReadOnly) == 0 {
		return nil, fmt.Errorf("%s: no operation carries %s", file, Extension)
	}
	return res, nil
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

// normalize turns an extension's value into plain JSON values (objects as
// map[string]any, numbers as float64), whatever the loader produced.
func normalize(raw any) any {
	b, err := json.Marshal(raw)
	if err != nil {
		return nil
	}
	var v any
	if json.Unmarshal(b, &v) != nil {
		return nil
	}
	return v
}

// syntaxError reports a YAML or JSON syntax error of data at its line and
// column (JSON is YAML, so one parser serves both).
func syntaxError(file string, data []byte) error {
	var v any
	err := yaml.Unmarshal(data, &v)
	if err == nil {
		return nil
	}
	var ye yaml.Error
	if errors.As(err, &ye) {
		if tk := ye.GetToken(); tk != nil && tk.Position != nil {
			return fmt.Errorf("%s:%d:%d: invalid YAML or JSON: %s", file, tk.Position.Line, tk.Position.Column, ye.GetMessage())
		}
		return fmt.Errorf("%s: invalid YAML or JSON: %s", file, ye.GetMessage())
	}
	return fmt.Errorf("%s: invalid YAML or JSON: %v", file, err)
}

// readFromForward rewrites the path of each route that undoes others: a
// compensation row's payload holds forward_key, forward_payload and
// forward_response, so a path parameter of the compensating operation is
// read from the forward call's answer (the resource it made): the field of
// the same name when the forward operation's answer declares one, else its
// id ({comment_id} of DELETE /comments/{comment_id} undoing POST /comments,
// which answers {id, …}: {forward_response.id}), else the same name. Its
// body is that payload (without_path_fields is dropped: the parameters are
// not top-level fields of it). answers maps each operation to the
// properties of its JSON answer.
func readFromForward(routes []Route, answers map[string][]string) {
	undone := map[string][]string{}
	for _, r := range routes {
		if r.Compensation != "" {
			undone[r.Compensation] = append(undone[r.Compensation], r.Tool)
		}
	}
	for i := range routes {
		r := &routes[i]
		if r.Undoes = undone[r.Tool]; len(r.Undoes) == 0 {
			continue
		}
		var props []string
		for _, f := range r.Undoes {
			props = append(props, answers[f]...)
		}
		for _, name := range pathParams(r.Path) {
			if name == "tool_name" || name == "forward_key" {
				continue
			}
			field := name
			if !slices.Contains(props, name) && slices.Contains(props, "id") {
				field = "id"
			}
			r.Path = strings.ReplaceAll(r.Path, "{"+name+"}", "{forward_response."+field+"}")
			r.FromForward = append(r.FromForward, name+"="+field)
		}
		if len(r.FromForward) > 0 {
			r.Body = ""
		}
	}
}

// answersOf maps each operation to the properties of its JSON answer.
func answersOf(ops []op) map[string][]string {
	answers := map[string][]string{}
	for _, o := range ops {
		answers[o.id] = answerProps(o.op)
	}
	return answers
}

// answerProps returns the properties of the JSON schema of op's first 2xx
// answer (nil: none declared).
func answerProps(op *openapi3.Operation) []string {
	if op == nil || op.Responses == nil {
		return nil
	}
	for _, code := range []int{200, 201, 202} {
		ref := op.Responses.Status(code)
		if ref == nil || ref.Value == nil {
			continue
		}
		mt := ref.Value.Content.Get("application/json")
		if mt == nil || mt.Schema == nil || mt.Schema.Value == nil {
			continue
		}
		props, _, _ := schemaProps(mt.Schema.Value)
		return props
	}
	return nil
}
