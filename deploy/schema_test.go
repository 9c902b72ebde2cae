package deploy

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// crdSchema is one file of testdata/crds: the openAPIV3Schema of a CRD's
// served version, descriptions and status removed.
type crdSchema struct {
	Group   string         `json:"group"`
	Kind    string         `json:"kind"`
	Version string         `json:"version"`
	Schema  map[string]any `json:"openAPIV3Schema"`
}

func loadCRDSchemas(t *testing.T) map[string]crdSchema {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "crds", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRD schema in testdata/crds (%v)", err)
	}
	out := map[string]crdSchema{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var s crdSchema
		if err := yaml.UnmarshalStrict(data, &s); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[s.Group+"/"+s.Version+", Kind="+s.Kind] = s
	}
	return out
}

// validateSchema checks a JSON value against the structural-schema subset
// CRDs use: type, properties (no other field allowed unless
// additionalProperties or x-kubernetes-preserve-unknown-fields), items,
// required, enum, pattern, minLength, minimum, maximum, minItems,
// x-kubernetes-int-or-string and anyOf. CEL rules
// (x-kubernetes-validations) are not evaluated; the tests check the
// constraints they express that matter here.
func validateSchema(path string, v any, s map[string]any) []string {
	var errs []string
	fail := func(format string, args ...any) {
		errs = append(errs, path+": "+fmt.Sprintf(format, args...))
	}
	if v == nil {
		if s["nullable"] != true {
			fail("null value")
		}
		return errs
	}
	if enum, ok := s["enum"].([]any); ok && !slices.ContainsFunc(enum, func(e any) bool { return reflect.DeepEqual(e, v) }) {
		fail("%v is not one of %v", v, enum)
	}
	if s["x-kubernetes-int-or-string"] == true {
		switch x := v.(type) {
		case string:
		case float64:
			if x != math.Trunc(x) {
				fail("%v is neither an integer nor a string", v)
			}
		default:
			fail("%v is neither an integer nor a string", v)
		}
		return errs
	}
	if anyOf, ok := s["anyOf"].([]any); ok && s["type"] == nil {
		for _, alt := range anyOf {
			if am, _ := alt.(map[string]any); len(validateSchema(path, v, am)) == 0 {
				return errs
			}
		}
		fail("%v matches none of %v", v, anyOf)
		return errs
	}
	switch s["type"] {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			fail("want an object, got %T", v)
			return errs
		}
		props, _ := s["properties"].(map[string]any)
		addl, hasAddl := s["additionalProperties"]
		preserve := s["x-kubernetes-preserve-unknown-fields"] == true
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if ps, ok := props[k].(map[string]any); ok {
				errs = append(errs, validateSchema(path+"."+k, m[k], ps)...)
				continue
			}
			switch {
			case hasAddl:
				if as, ok := addl.(map[string]any); ok {
					errs = append(errs, validateSchema(path+"."+k, m[k], as)...)
				} else if addl == false {
					fail("unknown field %q", k)
				}
			case preserve, props == nil:
				// free-form object (e.g. metadata, checked elsewhere)
			default:
				fail("unknown field %q", k)
			}
		}
		if req, ok := s["required"].([]any); ok {
			for _, r := range req {
				if _, ok := m[r.(string)]; !ok {
					fail("missing required field %q", r)
				}
			}
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			fail("want an array, got %T", v)
			return errs
		}
		if mi, ok := s["minItems"].(float64); ok && float64(len(a)) < mi {
			fail("%d items, want at least %v", len(a), mi)
		}
		if is, ok := s["items"].(map[string]any); ok {
			for i, x := range a {
				errs = append(errs, validateSchema(fmt.Sprintf("%s[%d]", path, i), x, is)...)
			}
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			fail("want a string, got %T (%v): quote it", v, v)
			return errs
		}
		if ml, ok := s["minLength"].(float64); ok && float64(len(str)) < ml {
			fail("%q is shorter than %v", str, ml)
		}
		if p, ok := s["pattern"].(string); ok {
			// Kubernetes patterns are ECMA-262; the ones in these CRDs are
			// also valid RE2. One that is not is skipped, not failed.
			if re, err := regexp.Compile(p); err == nil && !re.MatchString(str) {
				fail("%q does not match %s", str, p)
			}
		}
	case "integer", "number":
		f, ok := v.(float64)
		if !ok {
			fail("want a %s, got %T (%v)", s["type"], v, v)
			return errs
		}
		if s["type"] == "integer" && f != math.Trunc(f) {
			fail("%v is not an integer", f)
		}
		if mn, ok := s["minimum"].(float64); ok && f < mn {
			fail("%v is below the minimum %v", f, mn)
		}
		if mx, ok := s["maximum"].(float64); ok && f > mx {
			fail("%v is above the maximum %v", f, mx)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			fail("want a boolean, got %T (%v)", v, v)
		}
	case nil:
	default:
		fail("schema type %v not supported by this validator", s["type"])
	}
	return errs
}

var jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()

// mirrorFieldsInSchema checks that every JSON field of the Go mirror type t
// exists in the CRD schema s, so the mirror types (decoded with
// DisallowUnknownFields) cannot accept a field the CRD does not have.
// Free-form objects (metadata) and types with their own JSON decoding are
// leaves.
func mirrorFieldsInSchema(path string, t reflect.Type, s map[string]any) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		return nil
	}
	var errs []string
	switch t.Kind() {
	case reflect.Struct:
		props, _ := s["properties"].(map[string]any)
		if props == nil {
			return nil // free-form in the schema (metadata)
		}
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if f.Anonymous && name == "" {
				errs = append(errs, mirrorFieldsInSchema(path, f.Type, s)...)
				continue
			}
			if name == "" {
				name = f.Name
			}
			ps, ok := props[name].(map[string]any)
			if !ok {
				errs = append(errs, fmt.Sprintf("%s.%s: field of the Go mirror type is not in the CRD schema", path, name))
				continue
			}
			errs = append(errs, mirrorFieldsInSchema(path+"."+name, f.Type, ps)...)
		}
	case reflect.Slice:
		if is, ok := s["items"].(map[string]any); ok {
			errs = append(errs, mirrorFieldsInSchema(path+"[]", t.Elem(), is)...)
		}
	case reflect.Map:
		if as, ok := s["additionalProperties"].(map[string]any); ok {
			errs = append(errs, mirrorFieldsInSchema(path+"{}", t.Elem(), as)...)
		} else {
			errs = append(errs, fmt.Sprintf("%s: a map in the Go mirror type, not in the CRD schema", path))
		}
	}
	return errs
}
