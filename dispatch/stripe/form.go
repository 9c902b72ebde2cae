package stripe

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Bounds of an encoded form. Stripe's parameters nest a few levels; the
// bounds keep a hostile payload (deep nesting repeats every parent name in
// each leaf) from growing a body without limit.
const (
	maxFormDepth = 32
	maxFormBytes = 1 << 20
)

// ErrInvalidPayload is wrapped by every FormEncode error. The errors never
// quote the payload.
var ErrInvalidPayload = errors.New("invalid payload")

// FormEncode turns a JSON object of Stripe parameters into the
// application/x-www-form-urlencoded body Stripe expects:
//
//   - nested objects become a[b]=c, arrays a[0]=x, a[1]=y (nulls in arrays
//     are dropped and the remaining elements renumbered);
//   - strings are sent as they are ("" included: Stripe reads it as "unset"),
//     booleans as true or false, numbers exactly as written in the JSON
//     (never reformatted as floats);
//   - null values, empty objects and empty arrays are left out;
//   - names are sorted at every level, so the same payload always gives the
//     same body (Stripe compares bodies when it replays a key).
//
// The payload must be one JSON object; parameter names must be non-empty and
// free of '[' and ']' (they would read as nesting). Nesting deeper than 32
// levels or a body larger than 1 MiB is refused.
func FormEncode(payload []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("%w: not valid JSON", ErrInvalidPayload)
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", fmt.Errorf("%w: data after the JSON value", ErrInvalidPayload)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return "", fmt.Errorf("%w: must be a JSON object of Stripe parameters, got %s", ErrInvalidPayload, jsonKind(v))
	}
	e := formEncoder{}
	if err := e.object("", obj, 1); err != nil {
		return "", err
	}
	return e.b.String(), nil
}

type formEncoder struct{ b strings.Builder }

func (e *formEncoder) value(name string, v any, depth int) error {
	switch v := v.(type) {
	case nil:
		return nil
	case map[string]any:
		return e.object(name, v, depth+1)
	case []any:
		if depth+1 > maxFormDepth {
			return fmt.Errorf("%w: parameters nested deeper than %d levels", ErrInvalidPayload, maxFormDepth)
		}
		i := 0
		for _, elem := range v {
			if elem == nil {
				continue
			}
			if err := e.value(name+"["+strconv.Itoa(i)+"]", elem, depth+1); err != nil {
				return err
			}
			i++
		}
		return nil
	case string:
		return e.pair(name, v)
	case json.Number:
		return e.pair(name, v.String())
	case bool:
		return e.pair(name, strconv.FormatBool(v))
	}
	return fmt.Errorf("%w: unexpected JSON value %T", ErrInvalidPayload, v) // not produced by encoding/json
}

func (e *formEncoder) object(prefix string, obj map[string]any, depth int) error {
	if depth > maxFormDepth {
		return fmt.Errorf("%w: parameters nested deeper than %d levels", ErrInvalidPayload, maxFormDepth)
	}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		if k == "" || strings.ContainsAny(k, "[]") {
			return fmt.Errorf("%w: parameter names must be non-empty and must not contain '[' or ']'", ErrInvalidPayload)
		}
		name := k
		if prefix != "" {
			name = prefix + "[" + k + "]"
		}
		if err := e.value(name, obj[k], depth); err != nil {
			return err
		}
	}
	return nil
}

func (e *formEncoder) pair(name, value string) error {
	name, value = url.QueryEscape(name), url.QueryEscape(value)
	if e.b.Len()+1+len(name)+1+len(value) > maxFormBytes {
		return fmt.Errorf("%w: the form body would exceed %d bytes", ErrInvalidPayload, maxFormBytes)
	}
	if e.b.Len() > 0 {
		e.b.WriteByte('&')
	}
	e.b.WriteString(name)
	e.b.WriteByte('=')
	e.b.WriteString(value)
	return nil
}

// jsonKind names the kind of a decoded JSON value, for errors.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return "an object"
}
