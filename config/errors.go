package config

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Error is one problem in a config file, located at the offending key or
// value. It never holds an expanded ${env:…} or ${file:…} value.
type Error struct {
	// File is the config file's path as given to Load or Parse.
	File string
	// Line and Col are 1-based; 0 when the problem has no position (the file
	// could not be read, or the field was left at its default).
	Line, Col int
	// Field is the dotted path of the offending field, e.g.
	// adapters.payments.timeout; empty for a YAML syntax error.
	Field string
	// Msg says what is wrong.
	Msg string

	err error // wrapped cause, from Adapter.Errorf and Route.Errorf
}

// Error renders FILE:LINE:COL: field.path: message, leaving out the parts
// that are unknown.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
		if e.Col > 0 {
			b.WriteString(":" + strconv.Itoa(e.Col))
		}
	}
	if e.Field != "" {
		b.WriteString(": " + e.Field)
	}
	b.WriteString(": " + e.Msg)
	return b.String()
}

// Unwrap returns the wrapped cause, if any.
func (e *Error) Unwrap() error { return e.err }

// newLocatedError builds an Error from a format string; %w wraps.
func newLocatedError(file string, line int, field, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &Error{File: file, Line: line, Field: field, Msg: err.Error(), err: err}
}

// Errors is every problem found in a config file, sorted by position. Load
// and Parse return it (as an error) whenever the file is not usable; a
// command maps it to exit code 2.
type Errors []*Error

// Error renders one error per line.
func (l Errors) Error() string {
	lines := make([]string, len(l))
	for i, e := range l {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap lets errors.As find each *Error.
func (l Errors) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

// sort orders errors by line, column and field, and drops duplicates (an
// aliased node can report the same problem twice).
func (l Errors) sort() Errors {
	slices.SortStableFunc(l, func(a, b *Error) int {
		return cmp.Or(
			cmp.Compare(a.Line, b.Line),
			cmp.Compare(a.Col, b.Col),
			cmp.Compare(a.Field, b.Field),
			cmp.Compare(a.Msg, b.Msg),
		)
	})
	return slices.CompactFunc(l, func(a, b *Error) bool {
		return a.Line == b.Line && a.Col == b.Col && a.Field == b.Field && a.Msg == b.Msg
	})
}
