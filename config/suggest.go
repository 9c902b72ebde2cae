package config

import (
	"fmt"
	"strings"
)

// closest returns the candidate nearest to name (case-insensitive edit
// distance at most 2, and less than half of name's length), or "".
func closest(name string, candidates []string) string {
	best, bestDist := "", 3
	n := strings.ToLower(name)
	for _, c := range candidates {
		d := editDistance(n, strings.ToLower(c))
		if d < bestDist && d*2 < len(n) {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

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
