package config

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// The decoder walks the YAML syntax tree against the Go types of Config
// (through their yaml tags), so that it can report every unknown field and
// every type error at once, each at its line. goccy/go-yaml's own decoder
// stops at the first problem.

// source records where a field was written, for later messages.
type source struct {
	// keyLine and keyCol locate the field's key; line and col its value.
	keyLine, keyCol int
	line, col       int
	// raw is a scalar value as written, never expanded.
	raw string
	// refs counts the ${…} references in raw.
	refs int
	// bad is set when the value was rejected or could not be expanded:
	// later checks skip it.
	bad bool
}

// quoted renders the value as written for a message. A value holding a
// ${…} reference is named by its reference, never shown: "the value of
// ${env:X}". Never use it for a value that may be a secret.
func (s *source) quoted() string {
	if s.refs > 0 {
		return "the value of " + s.reference()
	}
	return strconv.Quote(s.raw)
}

// reference renders a value holding a ${…} reference as written: a lone
// reference bare (${env:X}), a reference within other text quoted
// ("${env:X}s").
func (s *source) reference() string {
	if segs, err := splitReferences(s.raw); err == nil && len(segs) == 1 && segs[0].Scheme != "" && segs[0].Text == s.raw {
		return s.raw
	}
	return strconv.Quote(s.raw)
}

// decodeBudget bounds the values decoded from one file, so aliases and
// merge keys cannot expand a small file into a huge amount of work.
const decodeBudget = 100_000

type decoder struct {
	file        string
	exp         expander
	src         map[string]*source
	errs, warns Errors
	// failed is set when the file as a whole is unusable (a YAML syntax
	// error, a top level that is not a mapping): validation is skipped.
	failed  bool
	anchors []anchor
	budget  int
	// untyped holds, by adapter path, the keys read from an adapter whose
	// type is missing or unknown (decoder.untypedField).
	untyped map[string][]reflect.Value
}

func newDecoder(file string, opts LoadOptions) *decoder {
	return &decoder{
		file:   file,
		exp:    expander{opts: opts},
		src:    make(map[string]*source),
		budget: decodeBudget,
	}
}

// errorAt records an error at a position.
func (d *decoder) errorAt(line, col int, field, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Col: col, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// valueError records an error at a field's value and marks it bad.
func (d *decoder) valueError(s *source, field, format string, args ...any) {
	s.bad = true
	d.errorAt(s.line, s.col, field, format, args...)
}

// decodeFile parses data and decodes it into cfg.
func (d *decoder) decodeFile(data []byte, cfg *Config) {
	f, err := parseYAML(data)
	if err != nil {
		d.failed = true
		var ye yaml.Error
		if errors.As(err, &ye) {
			line, col := 0, 0
			if tk := ye.GetToken(); tk != nil && tk.Position != nil {
				line, col = tk.Position.Line, tk.Position.Column
			}
			d.errorAt(line, col, "", "invalid YAML: %s", ye.GetMessage())
			return
		}
		d.errorAt(0, 0, "", "invalid YAML: %v", err)
		return
	}
	var body ast.Node
	for _, doc := range f.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		if body != nil {
			d.failed = true
			line, col := position(doc.Body)
			d.errorAt(line, col, "", "a config file holds one YAML document; remove the second one")
			return
		}
		body = doc.Body
	}
	if body == nil {
		return // empty, or only comments: every setting keeps its default
	}
	d.collectAnchors(body)
	root := d.resolve(body, "")
	if _, ok := root.(*ast.NullNode); ok {
		return // "~" or "null": as empty
	}
	m, ok := root.(*ast.MappingNode)
	if !ok {
		d.failed = true
		if root != nil {
			line, col := position(root)
			d.errorAt(line, col, "", "the top level must be a mapping of settings (workers: 16 …), got %s", kindOf(root))
		}
		return
	}
	d.structure(m, "", reflect.ValueOf(cfg).Elem())
	for name, a := range cfg.Adapters {
		a.Name, a.File, a.Line = name, d.file, d.src["adapters."+name].keyLine
	}
	for name, r := range cfg.Routes {
		r.ToolName, r.File, r.Line = name, d.file, d.src["routes."+name].keyLine
	}
	d.recordDatabaseSources(cfg)
}

// parseYAML parses data, turning a panic inside the YAML parser into an
// error: a config file must never crash the daemon.
func parseYAML(data []byte) (f *ast.File, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, err = nil, fmt.Errorf("the YAML parser failed on this input: %v", r)
		}
	}()
	return parser.ParseBytes(data, 0)
}

// join appends a key to a field path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

var adapterStruct = reflect.TypeFor[Adapter]()

// structure decodes a mapping into a struct, field by field through the
// yaml tags, reporting unknown keys.
func (d *decoder) structure(m *ast.MappingNode, path string, v reflect.Value) {
	if v.Type() == adapterStruct {
		d.adapter(m, path, v)
		return
	}
	fields := fieldsOf(v.Type())
	for _, e := range d.entries(m, path, 0) {
		p := join(path, e.key)
		i, ok := fields[e.key]
		if !ok {
			line, col := position(e.keyNode)
			d.errorAt(line, col, p, "%s", unknownFieldMessage(e.key, validNames(fields)))
			continue
		}
		d.field(e, p, v.Field(i))
	}
}

// validNames lists the keys a struct accepts.
func validNames(fields map[string]int) []string {
	return slices.Sorted(maps.Keys(fields))
}

// fieldsOf maps a struct's yaml keys to field indexes.
func fieldsOf(t reflect.Type) map[string]int {
	fields := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name != "" && name != "-" {
			fields[name] = i
		}
	}
	return fields
}

// field decodes one key's value into fv and records where it was written.
// A null value leaves the field unset, as if the key were absent.
func (d *decoder) field(e entry, path string, fv reflect.Value) {
	if d.budget--; d.budget < 0 {
		if d.budget == -1 {
			line, col := position(e.keyNode)
			d.errorAt(line, col, path, "the config expands to more than %d values through aliases", decodeBudget)
		}
		d.failed = true
		return
	}
	s := &source{}
	s.keyLine, s.keyCol = position(e.keyNode)
	s.line, s.col = position(e.value)
	d.src[path] = s
	if e.value == nil {
		delete(d.src, path)
		return
	}
	n := d.resolve(e.value, path)
	if n == nil {
		s.bad = true
		return
	}
	if _, ok := n.(*ast.NullNode); ok {
		delete(d.src, path)
		return
	}
	d.value(n, path, fv, s)
}

var (
	durationType  = reflect.TypeFor[time.Duration]()
	rateLimitType = reflect.TypeFor[*RateLimit]()
	byteSizeType  = reflect.TypeFor[ByteSize]()
)

// value decodes a node into fv according to fv's type.
func (d *decoder) value(n ast.Node, path string, fv reflect.Value, s *source) {
	t := fv.Type()
	switch {
	case t == durationType:
		text, ok := d.text(n, path, s, "a duration")
		if !ok {
			return
		}
		v, msg := parseDuration(text)
		if msg != "" {
			d.valueError(s, path, msg, s.quoted())
			return
		}
		fv.SetInt(int64(v))
	case t == byteSizeType:
		text, ok := d.text(n, path, s, `a size like "32MiB"`)
		if !ok {
			return
		}
		v, msg := parseByteSize(text)
		if msg != "" {
			d.valueError(s, path, msg, s.quoted())
			return
		}
		fv.SetInt(int64(v))
	case t == rateLimitType:
		text, ok := d.text(n, path, s, `a rate like "100/s"`)
		if !ok {
			return
		}
		rl, msg := parseRateLimit(text)
		if msg != "" {
			d.valueError(s, path, msg, s.quoted())
			return
		}
		fv.Set(reflect.ValueOf(rl))
	case t.Kind() == reflect.String:
		if text, ok := d.text(n, path, s, "a string"); ok {
			fv.SetString(text)
		}
	case t.Kind() == reflect.Int:
		d.integer(n, path, fv, s)
	case t.Kind() == reflect.Bool:
		d.boolean(n, path, fv, s)
	case t.Kind() == reflect.Pointer:
		elem := reflect.New(t.Elem())
		d.value(n, path, elem.Elem(), s)
		if !s.bad {
			fv.Set(elem)
		}
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		d.list(n, path, fv, s)
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		d.structList(n, path, fv, s)
	case t.Kind() == reflect.Map:
		d.mapping(n, path, fv, s)
	case t.Kind() == reflect.Struct:
		m, ok := n.(*ast.MappingNode)
		if !ok {
			d.valueError(s, path, "must be a mapping, got %s", kindOf(n))
			return
		}
		d.structure(m, path, fv)
	default:
		panic("config: no decoder for field type " + t.String()) // a field added without decoder support
	}
}

// text returns a scalar's text, ${…} references expanded (in YAML strings
// only). ok is false if there is no usable value; the reason is reported.
func (d *decoder) text(n ast.Node, path string, s *source, want string) (string, bool) {
	text, isString, ok := scalarText(n)
	if !ok {
		d.valueError(s, path, "must be %s, got %s", want, kindOf(n))
		return "", false
	}
	s.raw = text
	if !isString {
		return text, true
	}
	x := d.exp.expand(text)
	s.refs = x.refs
	for _, msg := range x.errs {
		d.errorAt(s.line, s.col, path, "%s", msg)
	}
	for _, msg := range x.warns {
		d.warns = append(d.warns, &Error{File: d.file, Line: s.line, Col: s.col, Field: path, Msg: msg})
	}
	if x.unresolved() {
		s.bad = true
		return "", false
	}
	return x.value, true
}

// integer decodes an int field.
func (d *decoder) integer(n ast.Node, path string, fv reflect.Value, s *source) {
	text, ok := d.text(n, path, s, "an integer")
	if !ok {
		return
	}
	i, err := strconv.ParseInt(strings.TrimSpace(text), 10, strconv.IntSize)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			d.valueError(s, path, "integer %s is out of range", s.quoted())
		} else {
			d.valueError(s, path, "must be an integer, got %s", s.quoted())
		}
		return
	}
	fv.SetInt(i)
}

// boolean decodes a bool field: true or false, in any letter case.
func (d *decoder) boolean(n ast.Node, path string, fv reflect.Value, s *source) {
	text, ok := d.text(n, path, s, "true or false")
	if !ok {
		return
	}
	switch strings.ToLower(strings.TrimSpace(text)) {
	case "true":
		fv.SetBool(true)
	case "false":
		fv.SetBool(false)
	default:
		d.valueError(s, path, "must be true or false, got %s", s.quoted())
	}
}

// list decodes a list of strings; element paths are path[i].
func (d *decoder) list(n ast.Node, path string, fv reflect.Value, s *source) {
	seq, ok := n.(*ast.SequenceNode)
	if !ok {
		d.valueError(s, path, "must be a list of strings, got %s", kindOf(n))
		return
	}
	out := reflect.MakeSlice(fv.Type(), 0, len(seq.Values))
	for i, item := range seq.Values {
		elem := reflect.New(fv.Type().Elem()).Elem()
		p := fmt.Sprintf("%s[%d]", path, i)
		d.field(entry{key: strconv.Itoa(i), keyNode: item, value: item}, p, elem)
		switch es := d.src[p]; {
		case es == nil: // null
			line, col := position(item)
			d.errorAt(line, col, p, "must be a string, got null")
			s.bad = true
		case es.bad:
			s.bad = true
		}
		out = reflect.Append(out, elem)
	}
	fv.Set(out)
}

// structList decodes a list of mappings (databases.static); element paths
// are path[i], so every element is kept (an unusable one empty) to keep
// the indexes of the slice and of the paths the same. A null element is an
// error.
func (d *decoder) structList(n ast.Node, path string, fv reflect.Value, s *source) {
	seq, ok := n.(*ast.SequenceNode)
	if !ok {
		d.valueError(s, path, "must be a list of mappings, got %s", kindOf(n))
		return
	}
	out := reflect.MakeSlice(fv.Type(), 0, len(seq.Values))
	for i, item := range seq.Values {
		elem := reflect.New(fv.Type().Elem()).Elem()
		p := fmt.Sprintf("%s[%d]", path, i)
		d.field(entry{key: strconv.Itoa(i), keyNode: item, value: item}, p, elem)
		if d.src[p] == nil { // null
			line, col := position(item)
			d.errorAt(line, col, p, "must be a mapping, got null")
		}
		out = reflect.Append(out, elem)
	}
	fv.Set(out)
}

// mapping decodes a map keyed by name: header names, adapter names, tool
// names. A null entry of a map of structs is an empty struct, so that its
// missing required fields are reported.
func (d *decoder) mapping(n ast.Node, path string, fv reflect.Value, s *source) {
	m, ok := n.(*ast.MappingNode)
	if !ok {
		d.valueError(s, path, "must be a mapping of names to values, got %s", kindOf(n))
		return
	}
	t := fv.Type()
	out := reflect.MakeMapWithSize(t, len(m.Values))
	for _, e := range d.entries(m, path, 0) {
		p := join(path, e.key)
		var elem reflect.Value
		if t.Elem().Kind() == reflect.Pointer && t.Elem().Elem().Kind() == reflect.Struct {
			elem = reflect.New(t.Elem().Elem())
			d.field(e, p, elem.Elem())
			if _, present := d.src[p]; !present { // null: an empty entry
				es := &source{}
				es.keyLine, es.keyCol = position(e.keyNode)
				es.line, es.col = es.keyLine, es.keyCol
				d.src[p] = es
			}
		} else {
			elem = reflect.New(t.Elem()).Elem()
			d.field(e, p, elem)
		}
		out.SetMapIndex(reflect.ValueOf(e.key).Convert(t.Key()), elem)
	}
	fv.Set(out)
}
