package openapiroutes

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
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

// route checks one manifest; every missing field is one message.
func route(o op, routed map[string]bool) (Route, []string) {
	m := o.m
	r := Route{Tool: o.id, Pointer: o.pointer, Class: m.Class}
	errs, known := classErrors(m, routed)
	if !known {
		return r, errs
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
	}
	return r, errs
}

// classErrors checks the fields m's class requires. known is false when the
// class is missing or unknown; nothing else is checked then.
func classErrors(m Manifest, routed map[string]bool) (errs []string, known bool) {
	switch m.Class {
	case "":
		return []string{missing("class", "one of "+strings.Join(classes, ", "))}, false
	case ClassReadOnly, ClassNaturallyIdempotent:
		return nil, true
	case ClassKeyIdempotent:
		return keyIdempotentErrors(m), true
	case ClassNonIdempotent:
		return compensationErrors(m, routed), true
	default:
		return []string{fmt.Sprintf("%s.class: unknown class %q; valid: %s", Extension, m.Class, strings.Join(classes, ", "))}, false
	}
}

// keyIdempotentErrors names the fields a key_idempotent manifest lacks.
func keyIdempotentErrors(m Manifest) []string {
	const why = "required for key_idempotent"
	var errs []string
	if m.KeyField == "" {
		errs = append(errs, missing("key_field", why))
	}
	if m.TTLSeconds == nil {
		errs = append(errs, missing("ttl_seconds", why))
	}
	if m.Scope == "" {
		errs = append(errs, missing("scope", why))
	}
	if m.ReplayHeader == "" && m.ReplayStatus == nil {
		errs = append(errs, missing("replay_header", why+": how a replay is marked (replay_header, or replay_status)"))
	}
	if m.ConflictStatus == nil {
		errs = append(errs, missing("conflict_status", why))
	}
	return errs
}

// compensationErrors checks the compensation triplet of a non_idempotent
// manifest; its operation must be a routed operation of the document.
func compensationErrors(m Manifest, routed map[string]bool) []string {
	c := m.Compensation
	if c == nil {
		if m.AgentSafe == nil || *m.AgentSafe {
			return []string{missing("compensation", "non_idempotent needs a compensation triplet {operation, detection, window_seconds}, or agent_safe: false")}
		}
		return nil
	}
	var errs []string
	if c.Operation == "" {
		errs = append(errs, missing("compensation.operation", "the operationId of the compensating operation"))
	} else if !routed[c.Operation] {
		errs = append(errs, fmt.Sprintf("%s.compensation.operation: %q is not an operation of this document with a routed %s class", Extension, c.Operation, Extension))
	}
	if c.Detection == "" {
		errs = append(errs, missing("compensation.detection", "how to tell whether the original succeeded"))
	}
	if c.WindowSeconds == nil {
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
