package config

import (
	"fmt"
	"strings"

	"github.com/drainer-io/drainer/internal/suggest"
)

// closest returns the candidate nearest to name, or "" (suggest.Closest).
func closest(name string, candidates []string) string { return suggest.Closest(name, candidates) }

// unknownFieldMessage says a key is unknown and what was probably meant.
func unknownFieldMessage(key string, valid []string) string {
	if s := closest(key, valid); s != "" {
		return fmt.Sprintf("unknown field; did you mean %q?", s)
	}
	return "unknown field; valid fields: " + strings.Join(valid, ", ")
}

// unknownNameHint completes "unknown X" messages: a suggestion and the
// names that exist (what names "adapter", "route").
func unknownNameHint(name string, known []string, what string) string {
	var b strings.Builder
	if s := closest(name, known); s != "" {
		fmt.Fprintf(&b, " (did you mean %q?)", s)
	}
	if len(known) == 0 {
		fmt.Fprintf(&b, "; no %ss are configured", what)
	} else {
		fmt.Fprintf(&b, "; configured %ss: %s", what, strings.Join(known, ", "))
	}
	return b.String()
}

// Closest returns the candidate nearest to name, or "" when none is close:
// the "did you mean" of other packages' messages about names read from files.
func Closest(name string, candidates []string) string { return closest(name, candidates) }
