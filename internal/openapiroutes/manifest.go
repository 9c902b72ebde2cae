package openapiroutes

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/drainer-io/drainer/config"
)

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

// route checks one operation: its manifest (every unknown, mistyped or
// missing field is one message, none hiding another), its agent_safe mark
// and its method and path.
func route(o op, routed map[string]bool, opts Options) (Route, []string) {
	m := o.m
	r := Route{Tool: o.id, Pointer: o.pointer, Class: m.Class}
	errs := append([]string(nil), o.errs...)
	classErrs, known := classErrors(m, o.bad, routed)
	errs = append(errs, classErrs...)
	if m.AgentSafe != nil && !*m.AgentSafe && m.Class != ClassReadOnly {
		if opts.AllowUnsafe {
			r.Unsafe = true
		} else {
			errs = append(errs, fmt.Sprintf("%s.agent_safe: false: the document marks this operation unsafe for agents; refused (pass --allow-unsafe to route it anyway)", Extension))
		}
	}
	ttl, ttlErrs := keyTTL(m)
	errs = append(errs, ttlErrs...)
	r.KeyTTL = ttl
	if m.KeyField != "" && m.Class != ClassReadOnly {
		loc, keyErrs := keyLocation(m)
		errs = append(errs, keyErrs...)
		r.KeyName, r.KeyLocation = m.KeyField, loc
	}
	if m.ConflictStatus != nil && !validStatus(m.ConflictStatus) {
		errs = append(errs, fmt.Sprintf("%s.conflict_status: must be an HTTP status code", Extension))
	}
	if m.Compensation != nil && m.Class == ClassNonIdempotent {
		r.Compensation = m.Compensation.Operation
		window, windowErrs := compensationWindow(*m.Compensation)
		errs = append(errs, windowErrs...)
		r.CompensationWindow = window
		if d := m.Compensation.Detection; d != "" {
			r.Detection = d
			r.Detect, r.DetectNote = detectProbe(d, o.server)
		}
	}
	if !known || m.Class != ClassReadOnly {
		errs = append(errs, request(o, &r)...)
	}
	return r, errs
}

// classErrors checks the fields m's class requires, except those of the
// wrong type (bad: already reported). known is false when the class is
// missing or unknown.
func classErrors(m Manifest, bad, routed map[string]bool) (errs []string, known bool) {
	switch m.Class {
	case "":
		if bad["class"] {
			return nil, false
		}
		return []string{missing("class", "one of "+strings.Join(classes, ", "))}, false
	case ClassReadOnly, ClassNaturallyIdempotent:
		return nil, true
	case ClassKeyIdempotent:
		return keyIdempotentErrors(m, bad), true
	case ClassNonIdempotent:
		return compensationErrors(m, bad, routed), true
	default:
		return []string{fmt.Sprintf("%s.class: unknown class %q; valid: %s", Extension, m.Class, strings.Join(classes, ", "))}, false
	}
}

// keyIdempotentErrors names the fields a key_idempotent manifest lacks.
func keyIdempotentErrors(m Manifest, bad map[string]bool) []string {
	const why = "required for key_idempotent"
	var errs []string
	if m.KeyField == "" && !bad["key_field"] {
		errs = append(errs, missing("key_field", why))
	}
	if m.TTLSeconds == nil && !bad["ttl_seconds"] {
		errs = append(errs, missing("ttl_seconds", why))
	}
	if m.Scope == "" && !bad["scope"] {
		errs = append(errs, missing("scope", why))
	}
	if m.ReplayHeader == "" && m.ReplayStatus == nil && !bad["replay_header"] {
		errs = append(errs, missing("replay_header", why+": how a replay is marked (replay_header, or replay_status)"))
	}
	if m.ConflictStatus == nil {
		errs = append(errs, missing("conflict_status", why))
	}
	return errs
}

// compensationErrors checks the compensation triplet of a non_idempotent
// manifest; its operation must be a routed operation of the document.
func compensationErrors(m Manifest, bad, routed map[string]bool) []string {
	c := m.Compensation
	if c == nil {
		if (m.AgentSafe == nil || *m.AgentSafe) && !bad["compensation"] && !bad["agent_safe"] {
			return []string{missing("compensation", "non_idempotent needs a compensation triplet {operation, detection, window_seconds}, or agent_safe: false")}
		}
		return nil
	}
	var errs []string
	if c.Operation == "" {
		if !bad["compensation.operation"] {
			errs = append(errs, missing("compensation.operation", "the operationId of the compensating operation"))
		}
	} else if !routed[c.Operation] {
		errs = append(errs, fmt.Sprintf("%s.compensation.operation: %q is not an operation of this document with a routed %s class", Extension, c.Operation, Extension))
	}
	if c.Detection == "" && !bad["compensation.detection"] {
		errs = append(errs, missing("compensation.detection", "how to tell whether the original succeeded"))
	}
	if c.WindowSeconds == nil && !bad["compensation.window_seconds"] {
		errs = append(errs, missing("compensation.window_seconds", "the maximum reversal window"))
	}
	return errs
}

// keyTTL checks ttl_seconds and returns the route's key TTL: zero when the
// field is absent or invalid, or the class is read_only.
func keyTTL(m Manifest) (time.Duration, []string) {
	if m.TTLSeconds == nil {
		return 0, nil
	}
	s := *m.TTLSeconds
	switch {
	case s != float64(int64(s)) || s <= 60 || s > 10*365*24*3600:
		return 0, []string{fmt.Sprintf("%s.ttl_seconds: must be a whole number of seconds above 60, got %s", Extension, strconv.FormatFloat(s, 'f', -1, 64))}
	case m.Class != ClassReadOnly:
		return time.Duration(s) * time.Second, nil
	}
	return 0, nil
}

// maxWindowSeconds bounds window_seconds (10 years), as ttl_seconds is
// bounded.
const maxWindowSeconds = 10 * 365 * 24 * 3600

// compensationWindow checks window_seconds and returns the route's
// compensation_window: zero when the field is absent or invalid.
func compensationWindow(c Compensation) (time.Duration, []string) {
	if c.WindowSeconds == nil {
		return 0, nil
	}
	s := *c.WindowSeconds
	if s != float64(int64(s)) || s < 1 || s > maxWindowSeconds {
		return 0, []string{fmt.Sprintf("%s.compensation.window_seconds: must be a whole number of seconds from 1 to %d (10 years), got %s",
			Extension, maxWindowSeconds, strconv.FormatFloat(s, 'f', -1, 64))}
	}
	return time.Duration(s) * time.Second, nil
}

// keyLocation checks where the key goes (header when key_location is
// absent) and, for a header, that key_field is a valid header name.
func keyLocation(m Manifest) (string, []string) {
	var errs []string
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
	return loc, errs
}

// missing is the message for a missing manifest field.
func missing(field, why string) string {
	return fmt.Sprintf("%s.%s: missing (%s)", Extension, field, why)
}

// manifestFields and compensationFields are the fields the extension
// knows (docs/reference.md §3); any other is refused with a "did you mean".
var (
	manifestFields     = []string{"class", "key_field", "key_location", "ttl_seconds", "scope", "replay_header", "replay_status", "conflict_status", "compensation", "agent_safe"}
	compensationFields = []string{"operation", "detection", "window_seconds"}
)

// decodeManifest reads one extension block. It reports every unknown field
// and every field of the wrong type at once; a field of the wrong type is
// left unset and marked in the returned set, so it is not also reported
// missing. A block that is not an object is one error and nothing else.
func decodeManifest(raw any) (Manifest, map[string]bool, []string) {
	var m Manifest
	obj, ok := raw.(map[string]any)
	if !ok {
		return m, nil, []string{Extension + ": must be an object"}
	}
	d := &manifestDecoder{bad: map[string]bool{}}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		v := obj[k]
		switch k {
		case "class":
			d.str(v, k, &m.Class)
		case "key_field":
			d.str(v, k, &m.KeyField)
		case "key_location":
			d.str(v, k, &m.KeyLocation)
		case "scope":
			d.str(v, k, &m.Scope)
		case "replay_header":
			d.str(v, k, &m.ReplayHeader)
		case "ttl_seconds":
			m.TTLSeconds = d.num(v, k)
		case "replay_status":
			m.ReplayStatus = v
		case "conflict_status":
			m.ConflictStatus = v
		case "agent_safe":
			if b, ok := v.(bool); ok {
				m.AgentSafe = &b
			} else {
				d.wrong(k, "true or false")
			}
		case "compensation":
			m.Compensation = d.compensation(v, k)
		default:
			d.unknown("", k, manifestFields)
		}
	}
	return m, d.bad, d.errs
}

// manifestDecoder collects what decodeManifest finds wrong: the messages,
// and the fields of the wrong type.
type manifestDecoder struct {
	errs []string
	bad  map[string]bool
}

func (d *manifestDecoder) unknown(prefix, key string, valid []string) {
	msg := fmt.Sprintf("%s.%s%s: unknown field", Extension, prefix, key)
	if s := config.Closest(key, valid); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	} else {
		msg += "; valid fields: " + strings.Join(valid, ", ")
	}
	d.errs = append(d.errs, msg)
}

func (d *manifestDecoder) wrong(field, want string) {
	d.bad[field] = true
	d.errs = append(d.errs, fmt.Sprintf("%s.%s: must be %s", Extension, field, want))
}

func (d *manifestDecoder) str(v any, field string, dst *string) {
	if s, ok := v.(string); ok {
		*dst = s
	} else {
		d.wrong(field, "a string")
	}
}

func (d *manifestDecoder) num(v any, field string) *float64 {
	if f, ok := number(v); ok {
		return &f
	}
	d.wrong(field, "a number")
	return nil
}

// compensation reads the compensation triplet of field k; nil when it is
// not an object.
func (d *manifestDecoder) compensation(v any, k string) *Compensation {
	c, ok := v.(map[string]any)
	if !ok {
		d.wrong(k, "an object {operation, detection, window_seconds}")
		return nil
	}
	comp := &Compensation{}
	for _, ck := range slices.Sorted(maps.Keys(c)) {
		switch cv := c[ck]; ck {
		case "operation":
			d.str(cv, "compensation.operation", &comp.Operation)
		case "detection":
			d.str(cv, "compensation.detection", &comp.Detection)
		case "window_seconds":
			comp.WindowSeconds = d.num(cv, "compensation.window_seconds")
		default:
			d.unknown("compensation.", ck, compensationFields)
		}
	}
	return comp
}

// number reads a JSON or YAML number (float64 from JSON, int or uint64
// from YAML).
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint64:
		return float64(x), true
	}
	return 0, false
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
