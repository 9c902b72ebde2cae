package wire

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
)

// FieldError is one problem of a settings struct, located by the field's
// path relative to the struct (url, headers.Host, brokers[0],
// sasl.password): the config loader turns it into FILE:LINE:COL:
// adapters.NAME.url: message.
type FieldError struct {
	Path string
	Msg  string
	// AtKey locates the problem at the field's key (its name is wrong)
	// rather than at its value.
	AtKey bool
	// Warning marks a finding that does not make the settings invalid.
	Warning bool
}

// Error renders path: message.
func (e FieldError) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

// FieldErrors is every problem found, in the order found.
type FieldErrors []FieldError

// Err joins the errors (warnings left out), one per line; nil when there
// are none.
func (l FieldErrors) Err() error {
	var errs []error
	for _, e := range l {
		if !e.Warning {
			errs = append(errs, e)
		}
	}
	return errors.Join(errs...)
}

// Source tells how the fields of a settings struct were written in a
// config file. A nil Source means the settings were set in Go: every field
// is known and literal.
type Source interface {
	// Written returns the field's value as written (${…} references
	// unexpanded) and whether the field was written at all (null counts as
	// not). known is false when its value was rejected already or a
	// reference in it was left unresolved (`drainer check` without the
	// secrets): it must not be checked further.
	Written(path string) (raw string, written, known bool)
}

// Checker collects the FieldErrors of one settings struct. Its methods make
// each rule state once what it checks, whatever the Source.
type Checker struct {
	Src  Source
	Errs FieldErrors
	// CheckMode is set by `drainer check` (config.LoadOptions.Check), which
	// may run on another machine than the daemon: a rule that looks at
	// this machine (an executable the adapter runs) reports what the
	// daemon would refuse as a warning, as an unset ${env:X} is one. The
	// daemon's own start is where such a problem is an error.
	CheckMode bool
}

// NewChecker starts a check of settings written as src tells (nil: in Go).
func NewChecker(src Source) *Checker { return &Checker{Src: src} }

// Errorf reports a problem with the value at path.
func (c *Checker) Errorf(path, format string, args ...any) {
	c.Errs = append(c.Errs, FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// KeyErrorf reports a problem with the key (the name) at path.
func (c *Checker) KeyErrorf(path, format string, args ...any) {
	c.Errs = append(c.Errs, FieldError{Path: path, Msg: fmt.Sprintf(format, args...), AtKey: true})
}

// Warnf records a warning at the key at path.
func (c *Checker) Warnf(path, format string, args ...any) {
	c.Errs = append(c.Errs, FieldError{Path: path, Msg: fmt.Sprintf(format, args...), AtKey: true, Warning: true})
}

// Add records errors found by a nested check, their paths under prefix.
func (c *Checker) Add(prefix string, errs FieldErrors) {
	for _, e := range errs {
		e.Path = Join(prefix, e.Path)
		c.Errs = append(c.Errs, e)
	}
}

// Known reports whether the value at path can be checked: written in Go
// (empty counts, the caller's rule decides), or written in the file with a
// value that was neither rejected nor left unresolved.
func (c *Checker) Known(path string) bool {
	if c.Src == nil {
		return true
	}
	_, written, known := c.Src.Written(path)
	return written && known
}

// Set reports whether the field at path was given a value: written in the
// file, or non-empty in Go.
func (c *Checker) Set(path string, empty bool) bool {
	if c.Src == nil {
		return !empty
	}
	_, written, _ := c.Src.Written(path)
	return written
}

// Require reports a missing required field (empty, for settings set in
// Go); it returns whether the value is there to be checked.
func (c *Checker) Require(path string, empty bool) bool {
	if !c.Set(path, empty) {
		c.KeyErrorf(path, "required field is missing")
		return false
	}
	return c.Known(path)
}

// Raw returns the value at path as written, or val when set in Go.
func (c *Checker) Raw(path, val string) string {
	if c.Src == nil {
		return val
	}
	raw, _, _ := c.Src.Written(path)
	return raw
}

// FromReference reports whether the value at path came from a ${…}
// reference.
func (c *Checker) FromReference(path string) bool {
	return c.Src != nil && HasReference(c.Raw(path, ""))
}

// Quote renders the value at path for a message: quoted, or, when it came
// from a reference, named by it ("the value of ${env:X}": the expanded
// value never appears in a message). Never use it for a value that may be
// a secret.
func (c *Checker) Quote(path, val string) string {
	if c.FromReference(path) {
		return "the value of " + strconv.Quote(c.Raw(path, val))
	}
	return strconv.Quote(val)
}

// Join appends a key to a field path.
func Join(path, key string) string {
	switch {
	case path == "":
		return key
	case key == "":
		return path
	}
	return path + "." + key
}

// Index is the path of a list's element.
func Index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// templateVar matches a {…} template variable.
var templateVar = regexp.MustCompile(`\{[^{}]*\}`)

// TemplateVars returns the {…} variables of a template's text.
func TemplateVars(s string) []string { return templateVar.FindAllString(s, -1) }
