package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
)

// validator checks values and cross-field rules after decoding. Fields that
// were not written are checked against their defaults where a rule involves
// them; fields whose value was rejected while decoding (source.bad) are
// skipped, so one mistake gives one error.
type validator struct {
	file        string
	src         map[string]*source
	cfg         *Config
	errs, warns Errors
	// untyped holds the keys read from adapters whose type is missing or
	// unknown, by adapter path (decoder.untypedField).
	untyped map[string][]reflect.Value
	// check is LoadOptions.Check: the adapters' checks run in check mode
	// (wire.Checker.CheckMode).
	check bool
}

// at locates a field's value; for a field not written in the file, the key
// of the nearest enclosing field that is.
func (v *validator) at(path string) (line, col int) {
	if s := v.src[path]; s != nil {
		return s.line, s.col
	}
	return v.keyAt(parentPath(path))
}

// keyAt locates a field's key, or the nearest written enclosing key.
func (v *validator) keyAt(path string) (line, col int) {
	for ; path != ""; path = parentPath(path) {
		if s := v.src[path]; s != nil {
			return s.keyLine, s.keyCol
		}
	}
	return 0, 0
}

func parentPath(path string) string {
	i := strings.LastIndexByte(path, '.')
	if i < 0 {
		return ""
	}
	return path[:i]
}

// errorf reports a problem with a field's value.
func (v *validator) errorf(path, format string, args ...any) {
	line, col := v.at(path)
	v.errs = append(v.errs, &Error{File: v.file, Line: line, Col: col, Field: path, Msg: fmt.Sprintf(format, args...)})
}

// keyErrorf reports a problem with a field's key (its name).
func (v *validator) keyErrorf(path, format string, args ...any) {
	line, col := v.keyAt(path)
	v.errs = append(v.errs, &Error{File: v.file, Line: line, Col: col, Field: path, Msg: fmt.Sprintf(format, args...)})
}

// warnf records a warning located at a field's key.
func (v *validator) warnf(path, format string, args ...any) {
	line, col := v.keyAt(path)
	v.warns = append(v.warns, &Error{File: v.file, Line: line, Col: col, Field: path, Msg: fmt.Sprintf(format, args...)})
}

// set reports whether a field was written in the file (null counts as not).
func (v *validator) set(path string) bool { return v.src[path] != nil }

// usable reports whether a field was written and its value can be checked.
func (v *validator) usable(path string) bool {
	s := v.src[path]
	return s != nil && !s.bad
}

// quoted is the value as written, for messages.
func (v *validator) quoted(path string) string { return v.src[path].quoted() }

// show renders a duration for a message: its reference as written when it
// came from one (an expanded value never appears in a message: "lease
// ${env:LEASE} must exceed …"), else formatted.
func (v *validator) show(path string, d time.Duration) string {
	if s := v.src[path]; s != nil && s.refs > 0 {
		return s.reference()
	}
	return formatDuration(d)
}

// hint completes an "unknown name" message. A name that came from a
// reference gets no "did you mean": the suggestion would reveal what the
// expanded value resembles.
func (v *validator) hint(path, name string, known []string, what string) string {
	if v.src[path].refs > 0 {
		name = ""
	}
	return unknownNameHint(name, known, what)
}

// require reports a missing required field; it returns whether the field
// is usable.
func (v *validator) require(path string) bool {
	if !v.set(path) {
		v.keyErrorf(path, "required field is missing")
		return false
	}
	return v.usable(path)
}

// positive checks a duration that must be above zero.
func (v *validator) positive(path string, d time.Duration) {
	if v.usable(path) && d <= 0 {
		v.errorf(path, "must be positive, got %s", v.quoted(path))
	}
}

// effective returns a duration's value, its default when not written, and
// whether it is known (false when the written value was rejected).
func (v *validator) effective(path string, val, def time.Duration) (time.Duration, bool) {
	if !v.set(path) {
		return def, true
	}
	return val, v.usable(path)
}

// oneOf checks an enumerated string.
func (v *validator) oneOf(path, val string, valid ...string) {
	if v.usable(path) && !slices.Contains(valid, val) {
		v.errorf(path, "must be one of %s, got %s", strings.Join(valid, ", "), v.quoted(path))
	}
}
